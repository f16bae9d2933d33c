"""Both coordinations run the contract (optimizer/testing/coordination.py): one process
(``coordination.Alone``) and workers sharing Optuna's storage (``worker.Shared``, here on a
sqlite file)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from evaluators.function.toy import make_toy_repo
from optimizer.archive import Archive
from optimizer.claims import Claims
from optimizer.coordination import Alone
from optimizer.targets import load_target
from optimizer.testing.coordination import CoordinationContract, Opened, night_of


def _target(tmp_path: Path):  # type: ignore[no-untyped-def]
    repo = make_toy_repo(tmp_path / "repo")
    return load_target(repo / "targets/function/toy", repo)


def _open(coordination, r, storage, target) -> Opened:  # type: ignore[no-untyped-def]
    study = optuna.create_study(storage=storage, study_name=f"exp/{target.name}")
    archive = Archive(target)
    coordination.open_target(r, study, target, archive, outputs=lambda *a: None)
    return Opened(coordination, r, study, SimpleNamespace(target=target, archive=archive,
                                                          names=None))


class TestAlone(CoordinationContract):
    @pytest.fixture
    def opened(self, tmp_path: Path) -> Iterator[Opened]:
        url = f"sqlite:///{tmp_path}/optuna.db"
        r = night_of(tmp_path, None, url)
        yield _open(Alone(), r, url, _target(tmp_path))
        r.writer.close()


class TestShared(CoordinationContract):
    @pytest.fixture
    def opened(self, tmp_path: Path) -> Iterator[Opened]:
        from optimizer.shared_stores import Night, SharedStorage
        from optimizer.worker import Shared

        storage = SharedStorage(f"sqlite:///{tmp_path}/optuna.db", heartbeat_s=1, grace_s=3)
        workers = optuna.create_study(storage=storage, study_name="exp:workers")
        wsid = storage.get_study_id_from_name(workers.study_name)
        night = Night("n1", 1, time.time(), time.time() + 60, 1.0, "", "")
        shared = Shared(storage, Claims(storage), night, "w1", wsid, 1, 3)
        r = night_of(tmp_path, None, storage)
        yield _open(shared, r, storage, _target(tmp_path))
        r.writer.close()
