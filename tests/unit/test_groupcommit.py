"""GroupCommitter: concurrent submits share one write; each caller gets its own result."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from support.waiting import wait_until

from triggerhook.domain.task import CancelResult, InsertOutcome, Task
from triggerhook.engine.groupcommit import GroupCommitter
from triggerhook.errors import (
    EngineFailure,
    NotRunningError,
    Overloaded,
    StoreError,
    StoreUnavailable,
    TriggerHookError,
)
from triggerhook.interfaces import NewRow

WAIT_S = 5.0


Committer = GroupCommitter[NewRow, InsertOutcome]


def row(name: str) -> NewRow:
    return NewRow(Task(name, 1_700_000_000_000, "rk"))


def outcome_for(name: str) -> InsertOutcome:
    """A per-row outcome the fake write derives from the id, so callers can check theirs."""
    index = int(name.rsplit("-", 1)[1])
    return [InsertOutcome.CREATED, InsertOutcome.EXISTS, InsertOutcome.CONFLICT][index % 3]


class FakeWrite:
    """The write function: records batches; the first call blocks until ``gate`` opens,
    so that the callers arriving meanwhile queue up behind it."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.error = error
        self._lock = threading.Lock()

    def __call__(self, rows: Sequence[NewRow]) -> list[InsertOutcome]:
        self.entered.set()
        assert self.gate.wait(WAIT_S), "test never opened the gate"
        with self._lock:
            self.batches.append([r.task.id for r in rows])
        if self.error is not None:
            raise self.error
        return [outcome_for(r.task.id) for r in rows]


class Failures:
    def __init__(self) -> None:
        self.seen: list[tuple[str, BaseException]] = []

    def __call__(self, name: str, exc: BaseException) -> None:
        self.seen.append((name, exc))


class Caller(threading.Thread):
    """One thread calling submit once; keeps its outcome or error."""

    def __init__(self, committer: Committer, name: str, timeout_s: float = WAIT_S) -> None:
        super().__init__(name=f"caller-{name}", daemon=True)
        self.committer = committer
        self.row_name = name
        self.timeout_s = timeout_s
        self.outcome: InsertOutcome | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.outcome = self.committer.submit(row(self.row_name), timeout_s=self.timeout_s)
        except BaseException as exc:
            self.error = exc


def queued(committer: Committer) -> int:
    return len(committer._calls)


def start_callers(committer: Committer, names: list[str]) -> list[Caller]:
    callers = [Caller(committer, name) for name in names]
    for caller in callers:
        caller.start()
    return callers


def join_all(callers: list[Caller]) -> None:
    for caller in callers:
        caller.join(WAIT_S)
        assert not caller.is_alive(), f"{caller.name} still blocked in submit"


class SpyCommitter(GroupCommitter[NewRow, InsertOutcome]):
    """The real committer, recording each attempt to abandon a call and its result."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.abandon_results: list[bool] = []
        self.abandon_tried = threading.Event()

    def abandon(self, call: Any) -> bool:
        result = super().abandon(call)
        self.abandon_results.append(result)
        self.abandon_tried.set()
        return result


Factory = Callable[..., tuple[SpyCommitter, FakeWrite, Failures]]


@pytest.fixture
def make() -> Iterator[Factory]:
    made: list[tuple[SpyCommitter, FakeWrite]] = []

    def factory(
        max_batch: int = 100,
        error: BaseException | None = None,
        max_queued: int = 10_000,
        discard: Callable[[Sequence[NewRow]], None] | None = None,
    ) -> tuple[SpyCommitter, FakeWrite, Failures]:
        write = FakeWrite(error)
        failures = Failures()
        committer = SpyCommitter(
            write,
            max_batch,
            writers=1,
            on_failure=failures,
            max_queued=max_queued,
            discard=discard,
        )
        committer.start()
        made.append((committer, write))
        return committer, write, failures

    yield factory
    for committer, write in made:
        write.gate.set()
        committer.stop()
        assert committer.join(WAIT_S)


def hold_first_batch(committer: Committer, write: FakeWrite) -> Caller:
    """A first caller whose batch (of one) is being written and is held at the gate."""
    first = Caller(committer, "row-0")
    first.start()
    assert write.entered.wait(WAIT_S)
    return first


def test_concurrent_submits_are_batched_and_each_gets_its_outcome(make: Factory) -> None:
    committer, write, failures = make()
    first = hold_first_batch(committer, write)
    names = [f"row-{i}" for i in range(1, 9)]
    callers = start_callers(committer, names)
    assert wait_until(lambda: queued(committer) == len(names), WAIT_S)

    write.gate.set()
    join_all([first, *callers])

    assert write.batches[0] == ["row-0"]
    assert max(len(b) for b in write.batches) > 1  # callers shared a write
    assert sorted(n for b in write.batches for n in b) == sorted(["row-0", *names])
    for caller in [first, *callers]:
        assert caller.error is None
        assert caller.outcome is outcome_for(caller.row_name)
    assert failures.seen == []


def test_batches_are_bounded_by_max_batch(make: Factory) -> None:
    committer, write, _ = make(max_batch=3)
    first = hold_first_batch(committer, write)
    callers = start_callers(committer, [f"row-{i}" for i in range(1, 8)])
    assert wait_until(lambda: queued(committer) == 7, WAIT_S)
    write.gate.set()
    join_all([first, *callers])
    assert [len(b) for b in write.batches] == [1, 3, 3, 1]
    for caller in callers:
        assert caller.outcome is outcome_for(caller.row_name)


@pytest.mark.parametrize(
    "error",
    [StoreUnavailable("connection lost"), StoreError("rejected")],
    ids=["unavailable", "store-error"],
)
def test_a_failed_write_raises_in_every_caller_of_that_batch(
    make: Factory, error: TriggerHookError
) -> None:
    committer, write, failures = make(error=error)
    first = hold_first_batch(committer, write)
    callers = start_callers(committer, [f"row-{i}" for i in range(1, 6)])
    assert wait_until(lambda: queued(committer) == 5, WAIT_S)
    write.gate.set()
    join_all([first, *callers])

    assert [len(b) for b in write.batches] == [1, 5]
    for caller in [first, *callers]:
        assert caller.outcome is None
        assert caller.error is error  # the store's own error, for every caller
    assert failures.seen == []  # a store error does not kill the writer
    # ... which keeps serving later calls.
    write.error = None
    assert committer.submit(row("row-9"), timeout_s=WAIT_S) is outcome_for("row-9")


def test_an_unexpected_write_exception_fails_callers_and_reports(make: Factory) -> None:
    boom = RuntimeError("bug in write")
    committer, write, failures = make(error=boom)
    write.gate.set()
    with pytest.raises(EngineFailure, match="bug in write"):
        committer.submit(row("row-1"), timeout_s=WAIT_S)
    assert wait_until(lambda: len(failures.seen) == 1, WAIT_S)
    name, exc = failures.seen[0]
    assert name == "th-commit-0"
    assert exc is boom


def test_submit_after_stop_raises_not_running(make: Factory) -> None:
    committer, write, _ = make()
    write.gate.set()
    assert committer.submit(row("row-1"), timeout_s=WAIT_S) is outcome_for("row-1")
    committer.stop()
    with pytest.raises(NotRunningError):
        committer.submit(row("row-2"), timeout_s=WAIT_S)
    assert committer.join(WAIT_S)
    assert write.batches == [["row-1"]]


def test_stop_still_writes_calls_already_queued(make: Factory) -> None:
    committer, write, _ = make()
    first = hold_first_batch(committer, write)
    callers = start_callers(committer, ["row-1", "row-2"])
    assert wait_until(lambda: queued(committer) == 2, WAIT_S)
    committer.stop()
    write.gate.set()
    join_all([first, *callers])
    assert committer.join(WAIT_S)
    for caller in [first, *callers]:
        assert caller.error is None
        assert caller.outcome is outcome_for(caller.row_name)


def test_submit_times_out_as_store_unavailable(make: Factory) -> None:
    committer, write, _ = make()
    first = hold_first_batch(committer, write)  # the writer is busy: row-1 stays queued
    with pytest.raises(StoreUnavailable, match="not committed"):
        committer.submit(row("row-1"), timeout_s=0.05)
    write.gate.set()
    join_all([first])
    assert committer.submit(row("row-2"), timeout_s=WAIT_S) is outcome_for("row-2")
    assert write.batches == [["row-0"], ["row-2"]]  # the timed-out row-1 was never written


def test_named_committer_of_other_items() -> None:
    # The same machinery batches cancels: items are ids, results CancelResults.
    failures = Failures()
    batches: list[list[str]] = []

    def cancel(task_ids: Sequence[str]) -> list[CancelResult]:
        batches.append(list(task_ids))
        if "boom" in task_ids:
            raise RuntimeError("boom")
        return [
            CancelResult.CANCELLED if t.startswith("c") else CancelResult.NOT_FOUND
            for t in task_ids
        ]

    committer: GroupCommitter[str, CancelResult] = GroupCommitter(
        cancel, 10, 1, failures, name="cancel"
    )
    committer.start()
    try:
        assert committer.submit("c-1", timeout_s=WAIT_S) is CancelResult.CANCELLED
        assert committer.submit("x-1", timeout_s=WAIT_S) is CancelResult.NOT_FOUND
        with pytest.raises(EngineFailure):
            committer.submit("boom", timeout_s=WAIT_S)
        assert wait_until(lambda: len(failures.seen) == 1, WAIT_S)
        assert failures.seen[0][0] == "th-cancel-0"
    finally:
        committer.stop()
        assert committer.join(WAIT_S)
    assert batches == [["c-1"], ["x-1"], ["boom"]]


class Callback:
    """A non-blocking caller's ``done``: records what the writer thread handed it."""

    def __init__(self) -> None:
        self.calls: list[tuple[InsertOutcome | None, TriggerHookError | None, str]] = []
        self.called = threading.Event()

    def __call__(self, outcome: InsertOutcome | None, error: TriggerHookError | None) -> None:
        self.calls.append((outcome, error, threading.current_thread().name))
        self.called.set()


def test_enqueue_shares_the_batch_of_blocking_callers_and_calls_back(make: Factory) -> None:
    committer, write, _ = make()
    first = hold_first_batch(committer, write)
    blocked = start_callers(committer, ["row-1"])
    callbacks = {name: Callback() for name in ("row-2", "row-3")}
    for name, callback in callbacks.items():
        committer.enqueue(row(name), callback)  # returns at once
    assert wait_until(lambda: queued(committer) == 3, WAIT_S)
    assert not any(cb.called.is_set() for cb in callbacks.values())
    write.gate.set()
    join_all([first, *blocked])

    for name, callback in callbacks.items():
        assert callback.called.wait(WAIT_S)
        assert callback.calls == [(outcome_for(name), None, "th-commit-0")]
    assert write.batches == [["row-0"], ["row-1", "row-2", "row-3"]]


def test_enqueue_reports_a_failed_write_and_is_refused_when_stopping(make: Factory) -> None:
    committer, write, _ = make(error=StoreUnavailable("db down"))
    callback = Callback()
    committer.enqueue(row("row-0"), callback)
    write.gate.set()
    assert callback.called.wait(WAIT_S)
    ((outcome, error, _thread),) = callback.calls
    assert outcome is None and isinstance(error, StoreUnavailable)

    committer.stop()
    refused = Callback()
    with pytest.raises(NotRunningError):
        committer.enqueue(row("row-1"), refused)
    assert not refused.called.is_set()


# -- a bounded queue; callers that give up ------------------------------------------------


def test_a_full_queue_refuses_at_once_and_refused_calls_are_never_written(
    make: Factory,
) -> None:
    committer, write, _ = make(max_queued=2)
    first = hold_first_batch(committer, write)  # taken: it no longer counts as queued
    callbacks = {name: Callback() for name in ("row-1", "row-2")}
    for name, callback in callbacks.items():
        committer.enqueue(row(name), callback)
    assert queued(committer) == 2

    refused = Callback()
    with pytest.raises(Overloaded, match="2 calls already wait"):
        committer.enqueue(row("row-3"), refused)
    with pytest.raises(Overloaded):  # a blocking caller too, without waiting its timeout
        committer.submit(row("row-4"), timeout_s=WAIT_S)
    assert committer.refused == 2
    assert queued(committer) == 2

    write.gate.set()
    join_all([first])
    for name, callback in callbacks.items():
        assert callback.called.wait(WAIT_S)
        assert callback.calls == [(outcome_for(name), None, "th-commit-0")]
    # Room again once the queue drained.
    assert committer.submit(row("row-5"), timeout_s=WAIT_S) is outcome_for("row-5")
    written = [name for batch in write.batches for name in batch]
    assert written == ["row-0", "row-1", "row-2", "row-5"]
    assert not refused.called.is_set()


def test_an_abandoned_call_is_never_written_and_its_item_is_discarded(make: Factory) -> None:
    discarded: list[str] = []
    committer, write, _ = make(
        max_queued=1, discard=lambda rows: discarded.extend(r.task.id for r in rows)
    )
    first = hold_first_batch(committer, write)
    given_up = Callback()
    ticket = committer.enqueue(row("row-1"), given_up)

    assert ticket.abandon() is True  # still queued: taken out, never to be written
    assert ticket.abandon() is True  # and it stays abandoned
    assert queued(committer) == 0
    assert discarded == ["row-1"]
    assert committer.abandoned == 1
    kept = Callback()
    committer.enqueue(row("row-2"), kept)  # its slot is free again (max_queued=1)

    write.gate.set()
    join_all([first])
    assert kept.called.wait(WAIT_S)
    assert committer.submit(row("row-3"), timeout_s=WAIT_S) is outcome_for("row-3")
    assert write.batches == [["row-0"], ["row-2"], ["row-3"]]
    assert not given_up.called.is_set()  # an abandoned call's done is never called


def test_a_submit_that_timed_out_while_queued_is_never_written(make: Factory) -> None:
    discarded: list[str] = []
    committer, write, _ = make(discard=lambda rows: discarded.extend(r.task.id for r in rows))
    first = hold_first_batch(committer, write)
    with pytest.raises(StoreUnavailable, match="not written"):
        committer.submit(row("row-1"), timeout_s=0.05)
    assert committer.abandon_results == [True]
    assert discarded == ["row-1"]
    write.gate.set()
    join_all([first])
    assert committer.submit(row("row-2"), timeout_s=WAIT_S) is outcome_for("row-2")
    assert "row-1" not in [name for batch in write.batches for name in batch]


def test_a_taken_call_gets_its_real_outcome_after_the_caller_timed_out(make: Factory) -> None:
    committer, write, _ = make()
    # The gate is shut: row-1 is taken by the writer and its write is held.
    caller = Caller(committer, "row-1", timeout_s=0.05)
    caller.start()
    assert write.entered.wait(WAIT_S)
    assert committer.abandon_tried.wait(WAIT_S)  # the caller's timeout passed ...
    assert committer.abandon_results == [False]  # ... too late to give up: it was taken
    caller.join(0.2)
    assert caller.is_alive(), "the caller must wait for the write, not report a failure"

    write.gate.set()
    join_all([caller])
    assert caller.error is None
    assert caller.outcome is outcome_for("row-1")
    assert write.batches == [["row-1"]]


def test_a_taken_enqueued_call_cannot_be_abandoned_and_reports_its_outcome(
    make: Factory,
) -> None:
    committer, write, _ = make()
    callback = Callback()
    ticket = committer.enqueue(row("row-1"), callback)
    assert write.entered.wait(WAIT_S)  # taken
    assert ticket.abandon() is False
    write.gate.set()
    assert callback.called.wait(WAIT_S)
    assert callback.calls == [(outcome_for("row-1"), None, "th-commit-0")]


def test_giving_up_races_the_writer_but_each_call_is_written_or_abandoned_never_both() -> None:
    written: list[str] = []
    lock = threading.Lock()

    def write(rows: Sequence[NewRow]) -> list[InsertOutcome]:
        with lock:
            written.extend(r.task.id for r in rows)
        return [InsertOutcome.CREATED] * len(rows)

    discarded: list[str] = []
    committer: Committer = GroupCommitter(
        write,
        7,
        writers=2,
        on_failure=Failures(),
        discard=lambda rows: discarded.extend(r.task.id for r in rows),
    )
    committer.start()
    rng = random.Random(20240101)
    callbacks: dict[str, Callback] = {}
    abandoned: set[str] = set()
    kept: set[str] = set()
    try:
        for n in range(3000):
            name = f"row-{n}"
            callbacks[name] = Callback()
            ticket = committer.enqueue(row(name), callbacks[name])
            if rng.random() < 0.5:
                (abandoned if ticket.abandon() else kept).add(name)
            else:
                kept.add(name)
        assert wait_until(lambda: all(callbacks[n].called.is_set() for n in kept), WAIT_S)
    finally:
        committer.stop()
        assert committer.join(WAIT_S)
    assert abandoned, "the race never went the caller's way: the test proves nothing"
    assert set(written) == kept  # every kept call written, no abandoned one
    assert len(written) == len(kept)  # each once
    assert sorted(discarded) == sorted(abandoned)
    assert not any(callbacks[name].called.is_set() for name in abandoned)
    assert all(len(callbacks[name].calls) == 1 for name in kept)


# -- the HTTP API's non-blocking caller --------------------------------------------------


def _commit_wait(
    committer: Committer, name: str, timeout_s: float, monkeypatch: pytest.MonkeyPatch
) -> InsertOutcome:
    """Enqueue ``name`` like the HTTP API does and await it with ``timeout_s``."""
    from triggerhook.api import http

    monkeypatch.setattr(http, "_COMMIT_TIMEOUT_S", timeout_s)

    async def run() -> InsertOutcome:
        commit: http.Commit[InsertOutcome] = http.Commit()
        commit.done.hold(committer.enqueue(row(name), commit.done))
        return await commit.wait()

    return asyncio.run(run())


def test_http_commit_gives_up_a_queued_call_with_503_and_it_is_never_written(
    make: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    committer, write, _ = make()
    first = hold_first_batch(committer, write)
    with pytest.raises(StoreUnavailable, match="not written"):
        _commit_wait(committer, "row-1", 0.05, monkeypatch)
    write.gate.set()
    join_all([first])
    assert committer.submit(row("row-2"), timeout_s=WAIT_S) is outcome_for("row-2")
    assert write.batches == [["row-0"], ["row-2"]]


def test_http_commit_of_a_taken_call_waits_for_the_real_outcome(
    make: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    committer, write, _ = make()

    def open_gate_after_the_give_up() -> None:
        assert committer.abandon_tried.wait(WAIT_S)
        write.gate.set()

    opener = threading.Thread(target=open_gate_after_the_give_up, daemon=True)
    opener.start()
    # The write is held until the 0.05 s timeout tried (and failed) to give up.
    assert _commit_wait(committer, "row-1", 0.05, monkeypatch) is outcome_for("row-1")
    opener.join(WAIT_S)
    assert committer.abandon_results == [False]
    assert write.batches == [["row-1"]]
