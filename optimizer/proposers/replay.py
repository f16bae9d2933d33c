"""Replay a recorded night: the answers of a cassette, in the order they were given.

Calls are matched on the target and the call index for that target (the n-th proposal for
``softmax`` gets the n-th recorded answer for ``softmax``), and the recorded parent must be
the context's parent: a night that diverged (another parent was picked) or ran longer than
the recording gets rejected proposals that say so, never someone else's answer. The edits
are parsed and applied again, so a replay also checks that the recorded answer still
applies. The recorded usage is reported unchanged, so a USD budget stops a replay where it
stopped the recorded night.
"""

from __future__ import annotations

from pathlib import Path

from optimizer.proposers._base import ProposalContext, Proposer
from optimizer.proposers.cassette import read_cassette
from optimizer.proposers.llm import proposal_from_answer, render_messages, usage_from_json
from optimizer.records import Proposal, Usage


class ReplayProposer(Proposer):
    """Proposals from a cassette written by :class:`~optimizer.proposers.llm.LLMProposer`."""

    name = "replay"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._records = {(str(r["target"]), int(r["index"])): r for r in read_cassette(path)}
        self._calls: dict[str, int] = {}

    def propose(self, context: ProposalContext) -> Proposal:
        target = context.target.name
        index = self._calls.get(target, 0)
        self._calls[target] = index + 1
        record = self._records.get((target, index))

        def reject(reason: str) -> Proposal:
            return Proposal(
                proposer=self.name,
                parent_id=context.parent.id,
                files=dict(context.parent.files),
                rejected=reason,
            )

        if record is None:
            recorded = sum(1 for t, _ in self._records if t == target)
            return reject(
                f"cassette {self.path.name} is exhausted for target {target!r}: it holds "
                f"{recorded} call(s), this is call {index + 1}"
            )
        if record.get("parent_id") != context.parent.id:
            return reject(
                f"cassette mismatch at call {index + 1} for target {target!r}: the recording "
                f"improved parent {record.get('parent_id')!r}, this run asks for "
                f"{context.parent.id!r} (the night diverged)"
            )
        usage = usage_from_json(record.get("usage") or {}) if record.get("usage") else Usage()
        return proposal_from_answer(
            context,
            proposer=f"replay:{record.get('model', '')}",
            text=str(record.get("response") or ""),
            finish_reason=record.get("finish_reason"),
            error=record.get("error"),
            usage=usage,
            prompt=render_messages(record.get("messages") or []),
        )
