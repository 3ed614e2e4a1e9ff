"""Lanes in the store kernel (docs/design/flow-control.md, section 3b; its
model: models/lanes.pml): which shards a write by id locks, and what happens
when the database gained the rate-limited lane after this instance read it.

A row stays in the shard it was written to (only a replace moves it), so a
write by id locks every candidate shard of the id (``Placement.candidates``)
in shared mode, then the task row, whose ``shard`` says where it is. An
instance that read the placement before another one added the lane locks
only the home shard: a row it then finds in a shard it did not lock is not
judged (the model's LOCK_HOME_ONLY: it could be armed meanwhile); the
placement is read again and the write retried once (:func:`retried`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from triggerhook.domain.arming import Placement
from triggerhook.errors import TransientError
from triggerhook.store.rows import TaskRow

P = ParamSpec("P")
T = TypeVar("T")


class LanesChanged(TransientError):
    """A row lies in a shard this write did not lock: the database gained the
    rate-limited lane since this instance read its placement."""


class _Placed(Protocol):
    def forget_placement(self) -> None: ...


S = TypeVar("S", bound=_Placed)


def candidates(placement: Placement, task_ids: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Each distinct id that a row can have (ASCII), with its candidate shards, in order."""
    found: dict[str, tuple[int, ...]] = {}
    for tid in task_ids:
        if tid not in found:
            try:
                found[tid] = placement.candidates(tid)
            except UnicodeEncodeError:
                continue
    return found


def lock_set(shards: Mapping[str, tuple[int, ...]]) -> set[int]:
    return {shard for each in shards.values() for shard in each}


def check_locked(found: Mapping[str, TaskRow], locked: Collection[int]) -> None:
    """Raise :class:`LanesChanged` if a row lies in a shard not locked."""
    stray = sorted({row.shard for row in found.values()} - set(locked))
    if stray:
        raise LanesChanged(
            f"rows in shards {stray} this write did not lock: the database gained the"
            " rate-limited lane; the placement is read again"
        )


def retried(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
    """Run a kernel write again, once, after :class:`LanesChanged` (it
    rolled back; its store forgot the placement, which is read anew)."""

    @functools.wraps(method)
    def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except LanesChanged:
            self.forget_placement()
            return method(self, *args, **kwargs)

    return run
