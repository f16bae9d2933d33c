"""CPU time of a sandboxed session, read by the trusted side from the kernel.

A session's CPU is read once when it is ready (its imports are done) and once when the
trusted side has sent its last request: the difference is everything the candidate's
process did in between, its threads included, whatever it does with its own clocks. One
difference of two readings errs by a clock tick or two (10 ms at the usual 100 ticks a
second), not by a tick per request.

The decoder's budget is a share of what the layers before the cut cost the trusted side on
the same tokens (:meth:`~evaluators.coinfer.splitlm.Split.front_cpu_s`), plus a fixed
allowance per request for the channel's own work (decoding the request and encoding the
answer in the child), plus two ticks. A decoder that recovers the tokens and recomputes
those layers spends at least their cost, whatever its payload says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optimizer.sandbox.procfs import TICKS

# The channel's work per request in the child: honest int8 decoders used 140-290 us of CPU
# per request on 2 busy cores (bf16 to 6-bit codecs, 512 requests, 2026-12-05), most of it
# unpacking the request and packing the answer; the allowance is above the worst of them.
REQUEST_ALLOWANCE_S = 400e-6


@dataclass
class SessionClock:
    """CPU seconds a session spends between :meth:`start` and :meth:`stop`."""

    session: Any
    start_s: float | None = None
    used_s: float | None = None
    requests: int = 0

    def start(self) -> None:
        self.start_s = self.session.cpu_s()

    def stop(self) -> float | None:
        end = self.session.cpu_s()
        if self.start_s is not None and end is not None:
            self.used_s = max(0.0, end - self.start_s)
        return self.used_s


def budget_s(front_cpu_s: float, share: float, requests: int) -> float:
    """The decoder's CPU budget: ``share`` of the front layers' cost, the channel's
    allowance for ``requests``, and two clock ticks of reading error."""
    return share * front_cpu_s + REQUEST_ALLOWANCE_S * requests + 2.0 / TICKS
