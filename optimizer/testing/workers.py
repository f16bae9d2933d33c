"""What a worker holds, read from the shared stores, and freezing one that holds something:
for tests and benchmarks that kill a worker mid-candidate (POSIX: SIGSTOP and SIGCONT)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from optimizer.claims import Claims
from optimizer.records import CandidateRecord


def held_trials(storage: optuna.storages.BaseStorage, claims: Claims, study_ids: list[int],
                worker: str) -> list[tuple[int, int]]:
    """(study id, trial number) of the RUNNING trials with a program that ``worker`` claimed
    and has not recorded whole yet (one recorded whole lost only its tell, which the
    survivors give it: it is not lost)."""
    held = []
    for sid in study_ids:
        running = storage.get_all_trials(sid, deepcopy=False, states=(TrialState.RUNNING,))
        payloads = claims.read(sid, [f"trial:{t.number}" for t in running])
        held += [(sid, t.number) for t in running
                 if (p := payloads.get(f"trial:{t.number}") or {}).get("files")
                 and p.get("worker") == worker
                 and not CandidateRecord.from_trial(t).complete]
    return held


def freeze_a_holder(storage: optuna.storages.BaseStorage, claims: Claims, study_ids: list[int],
                    workers: Mapping[str, Mapping[str, Any]],
                    ) -> tuple[str, list[tuple[int, int]]] | None:
    """The first of ``workers`` (id -> its worker record, with ``pid``) that holds a trial,
    frozen (SIGSTOP) so that what it holds cannot change, and what it holds read again:
    (id, held), the worker left frozen for the caller to kill. None if none does (a worker
    frozen between candidates is let go on)."""
    for wid, record in workers.items():
        if not held_trials(storage, claims, study_ids, wid):
            continue
        os.killpg(record["pid"], signal.SIGSTOP)
        time.sleep(0.2)  # a commit it sent before it stopped lands first
        if held := held_trials(storage, claims, study_ids, wid):
            return wid, held
        os.killpg(record["pid"], signal.SIGCONT)
    return None
