"""What happens to an event the broker did not take (pure policy, no I/O).

An event returned as unroutable or nacked is retried with an exponential
back-off; once it has failed ``max_attempts`` times, or is ``max_age_ms`` past
its due time, it is dead-lettered instead: published with the dead-letter
routing key and headers saying why. Its row is deleted only once that publish
is confirmed, so nothing is lost even then. Every publisher (AMQP's, and the
local one of ``triggerhook dev``) decides by this one policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from triggerhook.domain.meta import LatePolicy
from triggerhook.domain.series import overtaken
from triggerhook.domain.task import Task
from triggerhook.retry import capped_exponential

_FIRST_RETRY_MS = 100


@dataclass(frozen=True, slots=True)
class RetryLater:
    """Store the task back, to be armed again ``delay_ms`` from now."""

    delay_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Publish it as a dead letter now; ``reason`` goes in its headers."""

    reason: str


Decision = RetryLater | DeadLetter

# A dead letter's cause (its x-triggerhook-dead-cause header).
UNDELIVERABLE, LATE = "undeliverable", "late"


@dataclass(frozen=True, slots=True)
class Dead:
    """Why a dead letter is one: its ``cause`` and the ``reason`` in words."""

    cause: str
    reason: str


def dead_copy(task: Task, decision: DeadLetter) -> tuple[Task, Dead]:
    """The task as its dead letter goes out after a failure: the copy sent
    counts this failure, as the row would after a deferral."""
    copy = task.replace(attempts=task.attempts + 1)
    return copy, Dead(UNDELIVERABLE, decision.reason)


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    max_attempts: int
    max_age_ms: int  # 0: no age limit
    retry_max_ms: int

    def retry_delay_ms(self, attempt: int) -> int:
        """Back-off after the ``attempt``-th failure: 100 ms, doubling, capped."""
        return int(capped_exponential(max(attempt, 1) - 1, _FIRST_RETRY_MS, self.retry_max_ms))

    def after_failure(
        self, task: Task, reason: str, now_ms: float, was_dead: bool, retry: bool = True
    ) -> Decision:
        """The event of ``task`` failed (``reason``); ``was_dead``: it was
        itself a dead letter, which then waits the longest back-off and is
        tried again (a dead letter is never dropped); ``retry`` False: no
        retry can help (a webhook's 4xx), so a dead letter at once."""
        attempt = task.attempts + 1
        if was_dead:
            return RetryLater(self.retry_max_ms)
        if not retry:
            return DeadLetter(f"{reason}; not retried")
        if attempt >= self.max_attempts:
            return DeadLetter(f"{reason}; not delivered after {attempt} attempts")
        age_ms = now_ms - task.due_ms
        if self.max_age_ms and age_ms >= self.max_age_ms:
            return DeadLetter(
                f"{reason}; not delivered {int(age_ms)} ms after its due time"
                f" (limit {self.max_age_ms} ms)"
            )
        return RetryLater(self.retry_delay_ms(attempt))

    def screen(self, task: Task, now_ms: int, default_late: LatePolicy) -> Dead | None:
        """Why ``task`` must go out as a dead letter instead of its event when
        published at ``now_ms`` (None: publish it): its failures ran out, or
        its late-fire policy (else ``default_late``) says it is too late, or a
        series' catch-up policy ``skip`` that its next occurrence is due already."""
        if task.attempts and self.exhausted(task):
            return Dead(UNDELIVERABLE, f"not delivered after {task.attempts} attempts")
        late = (task.meta.late or default_late).too_late(task.due_ms, now_ms)
        recur = task.meta.recur
        if late is None and recur is not None:  # catch_up skip: overtaken by its next
            late = overtaken(recur, task.due_ms, now_ms)
        return None if late is None else Dead(LATE, late)

    def exhausted(self, task: Task) -> bool:
        """A task armed again after its failures ran out (its dead letter
        failed too, or an instance stopped before sending it): it goes
        straight to the dead-letter routing key."""
        return task.attempts >= self.max_attempts
