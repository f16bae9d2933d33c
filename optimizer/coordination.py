"""One process's night (``optimizer run``): its own storage, every candidate id and winner
its own, and the trials a killed run left behind recovered when a target opens. The
engine asks its questions of a :class:`optimizer.night.Coordination`; workers sharing a
night answer them in ``optimizer.worker.Shared``."""

from __future__ import annotations

from typing import Any

import optuna

from optimizer.archive import Archive
from optimizer.night import Coordination, LaneView, Outputs, Run, local_id
from optimizer.records import Proposal
from optimizer.targets import TargetSpec


class Alone(Coordination):
    """One process: its own storage, every id and winner its own."""

    def study_storage(self, r: Run) -> str:
        return r.config.optuna_storage

    def open_target(self, r: Run, study: optuna.Study, target: TargetSpec, archive: Archive,
                    outputs: Outputs) -> None:
        from optimizer.resume import load_archive, recover_interrupted

        recover_interrupted(r, study, target, outputs=outputs)
        load_archive(r, study, target, archive)

    def claim(self, lane: LaneView, proposal: Proposal, trial: Any, digest: str,
              files: dict[str, str], values: dict[str, Any], structure: str,
              known: str | None) -> tuple[str | None, str]:
        if known is not None:
            return known, ""
        return None, local_id(lane.archive, proposal)
