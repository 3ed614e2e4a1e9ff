"""triggerhook: a high-precision trigger engine (MySQL in, RabbitMQ out)."""

from triggerhook.app import Copied, Figures, Health, Scheduled, TaskSpec, TriggerHook
from triggerhook.domain.listing import BulkCancelled, Page, TaskFilter, Timeline, make_filter
from triggerhook.domain.meta import LateKind, LatePolicy, Meta
from triggerhook.domain.task import (
    CancelResult,
    InsertOutcome,
    OnConflict,
    RescheduleResult,
    SeriesResult,
    Task,
    TaskInfo,
    TaskState,
)
from triggerhook.errors import (
    AlreadyFiredError,
    ConfigError,
    ConflictError,
    NotRunningError,
    StoreUnavailable,
    TooLateError,
    TriggerHookError,
    ValidationError,
)
from triggerhook.interfaces import Moved
from triggerhook.outbox import schedule_in
from triggerhook.settings import Settings, load_settings
from triggerhook.wiring import assemble, build

__all__ = [
    "AlreadyFiredError",
    "BulkCancelled",
    "CancelResult",
    "ConfigError",
    "ConflictError",
    "Copied",
    "Figures",
    "Health",
    "InsertOutcome",
    "LateKind",
    "LatePolicy",
    "Meta",
    "Moved",
    "NotRunningError",
    "OnConflict",
    "Page",
    "RescheduleResult",
    "Scheduled",
    "SeriesResult",
    "Settings",
    "StoreUnavailable",
    "Task",
    "TaskFilter",
    "TaskInfo",
    "TaskSpec",
    "TaskState",
    "Timeline",
    "TooLateError",
    "TriggerHook",
    "TriggerHookError",
    "ValidationError",
    "assemble",
    "build",
    "load_settings",
    "make_filter",
    "schedule_in",
]
