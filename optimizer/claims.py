"""Atomic claims in Optuna's own tables: how workers on several machines share one night.

A claim is a row of Optuna's ``study_system_attributes`` table, which has a unique
constraint on ``(study_id, key)``. Claiming is one ``INSERT ... ON CONFLICT DO NOTHING``
through the RDB storage's SQLAlchemy engine: the database decides which of two workers
inserting the same key wins (PostgreSQL makes the second insert wait for the first
transaction and then do nothing; sqlite serialises writers on its database lock), and
the loser sees zero rows inserted. Claims are never deleted. Keys in a target's study:

- ``content:<hash>`` -> ``{"trial", "candidate"}``: the worker that inserts it evaluates
  that program; any other proposal of the same content (on any worker) is a duplicate
  of the candidate named in the row. Only the worker that re-runs a lost candidate
  rewrites the row, to name the re-run.
- ``id:<cNNNN>`` -> ``{"trial"}``: candidate ids, unique across workers; each worker
  tries the next id it does not know to be taken, then the one after, in the same
  transaction as the content claim.
- ``trial:<number>`` -> what re-running or reading the candidate needs (its id, content
  hash, files, knob values, parent, proposer, summary, structure): written in that same
  transaction, so a trial that holds a content claim always has it.
- ``lost:<number>``: the one worker that records a lost worker's trial and re-runs it.
- ``winners:<night>``: the one worker that selects, confirms and publishes the night's
  winner of the target.

The study ``<experiment>:workers`` holds a row per night (``night:<n>``, claimed in
sequence) and per worker (``worker:<id>``, written only by that worker).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.storages._rdb import models

from optimizer.errors import ConfigError
from optimizer.records import candidate_id

_TABLE = models.StudySystemAttributeModel.__table__


def _insert(dialect: str, row: Mapping[str, Any]) -> Any:
    """An insert of ``row`` that does nothing where the key is taken."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(_TABLE).values(**row).on_conflict_do_nothing(
            index_elements=["study_id", "key"])
    if dialect == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(_TABLE).values(**row).on_conflict_do_nothing(
            index_elements=["study_id", "key"])
    if dialect in ("mysql", "mariadb"):
        return sa.insert(_TABLE).values(**row).prefix_with("IGNORE")
    raise ConfigError(
        f"atomic claims need PostgreSQL, MySQL or sqlite under Optuna, not {dialect!r}; "
        "set [search] storage to a postgresql+psycopg2:// URL", key="search.storage")


class Claims:
    """Claims of one Optuna RDB storage (see the module docstring)."""

    def __init__(self, storage: optuna.storages.RDBStorage):
        self.engine: sa.engine.Engine = storage.engine
        self.dialect = self.engine.dialect.name
        _insert(self.dialect, {})  # an unsupported database is an error now, not mid-night

    def _put(self, conn: Any, study_id: int, key: str, value: Any) -> bool:
        row = {"study_id": study_id, "key": key, "value_json": json.dumps(value)}
        return bool(conn.execute(_insert(self.dialect, row)).rowcount)

    def take(self, study_id: int, key: str, value: Any) -> bool:
        """Claim ``key``: True for the one caller that inserted it."""
        with self.engine.begin() as conn:
            return self._put(conn, study_id, key, value)

    def candidate(
        self, study_id: int, *, digest: str, trial: int, first_id: int, payload: Mapping[str, Any],
        seed: bool = False, rerun: bool = False,
    ) -> tuple[bool, str]:
        """Claim a program and a candidate id for trial ``trial`` in one transaction.

        Returns (True, the new id) or (False, the id of the candidate that holds the
        content). ``digest`` "" claims an id only (a rejected proposal); ``seed`` claims
        the seed's id, ``first_id`` otherwise and the ones after it until one is free;
        ``rerun`` takes the content over from the lost candidate that held it."""
        content = f"content:{digest}"
        with self.engine.connect() as conn, conn.begin() as transaction:
            if digest and not rerun and not self._put(conn, study_id, content, {"trial": trial}):
                transaction.rollback()
                held = self.read(study_id, [content]).get(content) or {}
                return False, str(held.get("candidate", ""))
            number = 1 if seed else first_id
            while not self._put(conn, study_id, f"id:{candidate_id(number)}", {"trial": trial}):
                if seed:
                    raise RuntimeError("the seed's candidate id is taken by another trial")
                number += 1
            cid = candidate_id(number)
            if digest:
                conn.execute(
                    sa.update(_TABLE)
                    .where(_TABLE.c.study_id == study_id, _TABLE.c.key == content)
                    .values(value_json=json.dumps({"trial": trial, "candidate": cid})))
                if rerun:  # the lost candidate's row may be absent (killed before it claimed)
                    self._put(conn, study_id, content, {"trial": trial, "candidate": cid})
            self._put(conn, study_id, f"trial:{trial}",
                      {**payload, "candidate": cid, "content_hash": digest})
            return True, cid

    def read(self, study_id: int, keys: Iterable[str]) -> dict[str, Any]:
        """The values of those of ``keys`` that are claimed."""
        wanted = list(keys)
        out: dict[str, Any] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(wanted), 500):
                rows = conn.execute(
                    sa.select(_TABLE.c.key, _TABLE.c.value_json)
                    .where(_TABLE.c.study_id == study_id,
                           _TABLE.c.key.in_(wanted[start:start + 500])))
                out.update({k: json.loads(v) for k, v in rows})
        return out

    def prefixed(self, study_id: int, prefix: str) -> dict[str, Any]:
        """Every claimed key that starts with ``prefix`` (e.g. ``"worker:"``), with its value."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(_TABLE.c.key, _TABLE.c.value_json)
                .where(_TABLE.c.study_id == study_id,
                       _TABLE.c.key.like(f"{escaped}%", escape="\\")))
            return {k: json.loads(v) for k, v in rows}
