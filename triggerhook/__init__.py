"""triggerhook: a high-precision trigger engine (MySQL in, RabbitMQ out)."""

from triggerhook.app import Figures, Health, Scheduled, TaskSpec, TriggerHook
from triggerhook.domain.task import CancelResult, RescheduleResult, Task, TaskInfo, TaskState
from triggerhook.errors import (
    ConfigError,
    ConflictError,
    NotRunningError,
    StoreUnavailable,
    TriggerHookError,
    ValidationError,
)
from triggerhook.interfaces import Moved
from triggerhook.settings import Settings, load_settings
from triggerhook.wiring import assemble, build

__all__ = [
    "CancelResult",
    "ConfigError",
    "ConflictError",
    "Figures",
    "Health",
    "Moved",
    "NotRunningError",
    "RescheduleResult",
    "Scheduled",
    "Settings",
    "StoreUnavailable",
    "Task",
    "TaskInfo",
    "TaskSpec",
    "TaskState",
    "TriggerHook",
    "TriggerHookError",
    "ValidationError",
    "assemble",
    "build",
    "load_settings",
]
