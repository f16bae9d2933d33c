"""The background writer of a night (optimizer.night.Writer)."""

from __future__ import annotations

import threading
import time

import pytest

from optimizer.errors import OptimizerError
from optimizer.night import Writer


def test_jobs_run_in_order_and_flush_waits_for_them() -> None:
    w = Writer()
    done: list[int] = []

    def job(n: int):  # type: ignore[no-untyped-def]
        def run() -> int:
            time.sleep(0.002 * (5 - n % 5))  # later jobs are quicker: order is the queue's
            done.append(n)
            return n * n
        return run

    futures = [w.submit(job(n)) for n in range(20)]
    w.flush()
    assert done == list(range(20))
    assert [f.result() for f in futures] == [n * n for n in range(20)]
    w.close()
    assert not w._thread.is_alive()


def test_a_failing_job_makes_flush_and_submit_raise() -> None:
    w = Writer()
    ran: list[str] = []

    def boom() -> None:
        raise RuntimeError("the MLflow store is gone")

    w.submit(lambda: ran.append("before"))
    failed = w.submit(boom)
    w.submit(lambda: ran.append("after"))  # queued before the failure was seen: it runs
    with pytest.raises(OptimizerError, match="writing a record failed.*MLflow store is gone"
                       ".*--resume"):
        w.flush()
    assert ran == ["before", "after"]
    with pytest.raises(RuntimeError, match="gone"):
        failed.result()
    with pytest.raises(OptimizerError, match="writing a record failed"):
        w.submit(lambda: ran.append("never"))
    w.close()  # raises nothing: the error was reported
    assert ran == ["before", "after"]


def test_the_queue_is_bounded() -> None:
    w = Writer(maxsize=2)
    release = threading.Event()
    w.submit(release.wait)  # the thread is busy with this one
    time.sleep(0.05)
    w.submit(lambda: None)
    w.submit(lambda: None)  # the queue is full now
    returned = threading.Event()

    def third() -> None:
        w.submit(lambda: None)
        returned.set()

    t = threading.Thread(target=third, daemon=True)
    t.start()
    assert not returned.wait(0.3)  # the loop waits while the stores are behind
    release.set()
    assert returned.wait(5)
    w.flush()
    w.close()


def test_close_runs_what_is_queued() -> None:
    w = Writer()
    done: list[int] = []
    for n in range(5):
        w.submit(lambda n=n: done.append(n))
    w.close()
    assert done == list(range(5))
    w.close()  # twice is harmless
