"""What the oracle reads of the store (tests/sim/oracle.py): a row's view,
a revision's life, and the check that a write changed no row it must not."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RowView:
    """What the oracle reads of a stored row."""

    rev: int
    due_ms: int
    fire_ms: int
    occurrence: int | None  # a series' occurrence number; None: one-shot
    stopped: bool = False
    every_ms: int | None = None  # a series' schedule, as far as the oracle checks it
    until_ms: int | None = None
    paused: bool = False
    resume_ms: int | None = None  # a paused series' resume point; None: paused while armed
    catch_up: str = "one"  # a series' catch-up policy (None stored: "one")
    catch_up_max: int | None = None

    @property
    def parked(self) -> bool:
        """A paused series' row with a resume point: nothing of it may fire
        (PAUSED_AFTER_THIS marks a row without one: its occurrence fires)."""
        return self.paused and self.resume_ms is not None


Table = Mapping[str, RowView]


@dataclass(slots=True)
class Life:
    """One revision of a task, from the write that made it to the one that ended it."""

    due_ms: int
    series: bool
    born_ms: float
    payload: bytes | None  # as created or replaced (kept by moves); None: not known
    died_ms: float | None = None
    died_by: str | None = None  # cancel, reschedule, defer, delete, advance, pause, resume
    published_ms: list[float] = field(default_factory=list)
    parked: bool = False  # written while its series was paused: it must never fire
    # Due in the past by design (a resume under catch-up "one", a catch-up
    # copy): its lateness counts from this (its write), not from its due time.
    since_ms: float | None = None


class Violation(AssertionError):
    """A promise broken: the message says which and how."""


Diff = tuple[list[str], list[str], list[str]]


def nothing_else(name: str, diff: Diff, allowed: tuple[set[str], set[str], set[str]]) -> None:
    for kind, ids, ok in zip(("appeared", "vanished", "changed"), diff, allowed, strict=True):
        wrong = [t for t in ids if t not in ok]
        if wrong:
            raise Violation(f"{name}: rows {kind} without cause: {wrong}")
