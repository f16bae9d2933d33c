"""Which target a free slot serves, and which jobs run alone (optimizer/sharing.py)."""

from __future__ import annotations

import heapq

import pytest

from optimizer.sharing import DEFAULT_JOB_S, Gate, Shares


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_free_slot_serves_the_lane_furthest_behind_its_share() -> None:
    clock = Clock()
    shares = Shares([2.0, 1.0], clock)
    assert shares.most_behind([0, 1]) == 0  # a tie goes to the lane named first
    job = shares.begin(0)
    clock.now = 1.0
    assert shares.used_s(0) == pytest.approx(1.0)  # a running job counts as it runs
    assert shares.most_behind([0, 1]) == 1
    shares.end(job)
    other = shares.begin(1)
    clock.now = 2.5
    shares.end(other)
    # lane 0: 1 s for a share of 2, lane 1: 1.5 s for a share of 1
    assert shares.most_behind([0, 1]) == 0
    assert shares.most_behind([1]) == 1  # only the lanes with a job ready count
    assert shares.most_behind([]) is None


def test_a_job_alone_is_charged_for_every_slot_it_holds() -> None:
    clock = Clock()
    shares = Shares([1.0, 1.0], clock)
    job = shares.begin(0, slots=4)
    clock.now = 2.0
    assert shares.end(job) == pytest.approx(8.0)
    assert shares.used_s(0) == pytest.approx(8.0)


def test_waiting_jobs_count_at_their_lanes_typical_cost() -> None:
    clock = Clock()
    shares = Shares([1.0, 1.0, 1.0], clock)
    assert shares.typical_s(0) == DEFAULT_JOB_S  # nothing finished anywhere
    job = shares.begin(0)
    clock.now = 4.0
    shares.end(job)
    assert shares.typical_s(0) == pytest.approx(4.0)
    assert shares.typical_s(1) == pytest.approx(4.0)  # the night's mean, before its own
    job = shares.begin(1)
    clock.now = 5.0
    shares.end(job)
    assert shares.typical_s(1) == pytest.approx(1.0)
    # lane 2 has used nothing, but three jobs are waiting for it: 3 x 2.5 s
    assert shares.by_need([0, 1, 2], {2: 3}) == [1, 0, 2]
    assert shares.by_need([0, 1, 2]) == [2, 1, 0]


def test_shares_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Shares([1.0, 0.0])


@pytest.mark.parametrize(("shares", "costs"), [
    ((1.0, 1.0), (1.0, 1.0)),
    ((2.0, 1.0), (1.0, 1.0)),
    ((1.0, 0.7, 0.4), (0.5, 2.0, 7.0)),  # a lane of slow jobs still gets only its share
    ((1.0, 3.0), (3.0, 0.2)),
])
def test_slots_split_the_night_by_share(shares: tuple[float, ...],
                                        costs: tuple[float, ...]) -> None:
    """Two slots serving lanes that always have a job ready, each of a fixed cost: the
    slot-seconds each lane gets over a long night are its share of them."""
    clock = Clock()
    s = Shares(shares, clock)
    free_at = [(0.0, 0), (0.0, 1)]  # when each slot is free
    jobs: dict[int, int] = {}
    while clock.now < 2000.0:
        clock.now, slot = heapq.heappop(free_at)
        if slot in jobs:
            s.end(jobs.pop(slot))
        lane = s.most_behind(range(len(shares)))
        assert lane is not None
        jobs[slot] = s.begin(lane)
        heapq.heappush(free_at, (clock.now + costs[lane], slot))
    used = [s.used_s(i) for i in range(len(shares))]
    for i, share in enumerate(shares):
        assert used[i] / sum(used) == pytest.approx(share / sum(shares), abs=0.02), used


def test_a_lane_that_waits_leaves_its_time_to_the_others() -> None:
    """A lane with no job ready (its seed running, say) is passed over: the slots stay
    busy with the other lanes' jobs, whatever its share."""
    clock = Clock()
    s = Shares([10.0, 1.0], clock)
    seed = s.begin(0)  # ten seconds on one slot
    served = []
    for _ in range(10):  # the other slot meanwhile
        lane = s.most_behind([1])  # lane 0 has nothing ready
        served.append(lane)
        job = s.begin(lane)  # type: ignore[arg-type]
        clock.now += 1.0
        s.end(job)
    s.end(seed)
    assert served == [1] * 10
    assert s.used_s(0) == pytest.approx(10.0)


def test_the_gate_lets_a_job_alone_start_only_once_the_others_are_done() -> None:
    gate = Gate()
    gate.enter(alone=False)
    gate.enter(alone=False)
    assert gate.open()
    gate.enter(alone=True)  # claims the machine: nothing enters from now on
    assert not gate.open() and not gate.drained()
    with pytest.raises(RuntimeError):
        gate.enter(alone=False)
    with pytest.raises(RuntimeError):
        gate.enter(alone=True)
    gate.leave(alone=False)
    assert not gate.drained()
    gate.leave(alone=False)
    assert gate.drained()  # the job alone runs now
    gate.leave(alone=True)
    assert gate.open()
    gate.enter(alone=False)
    assert gate.running == 1
