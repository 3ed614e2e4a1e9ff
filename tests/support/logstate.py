"""Logging as a test found it, put back after it.

``cli.main`` (through ``logs.configure``) points the root logger's handler at
the ``sys.stderr`` of the moment: in a test that is the test's capture, closed
when the test ends. Left in place, every record a later test logs (a store
created in a fixture logs "creating the triggerhook schema") fails on the
closed stream and prints a ``--- Logging error ---`` traceback into that later
test's own capture. pytest's own capture handlers come and go per phase and are
left to pytest.
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass


def _loggers() -> list[logging.Logger]:
    named = logging.Logger.manager.loggerDict.values()
    return [logging.getLogger(), *(lg for lg in named if isinstance(lg, logging.Logger))]


def _pytests(handler: logging.Handler) -> bool:
    return type(handler).__module__.startswith("_pytest")


@dataclass(frozen=True)
class LoggingState:
    handlers: dict[str, tuple[list[logging.Handler], int, bool, bool]]
    disabled_level: int
    hooks: tuple[object, object]

    @classmethod
    def taken(cls) -> LoggingState:
        return cls(
            {lg.name: (lg.handlers[:], lg.level, lg.propagate, lg.disabled) for lg in _loggers()},
            logging.root.manager.disable,
            (sys.excepthook, threading.excepthook),
        )

    def restore(self) -> None:
        for logger in _loggers():
            kept = self.handlers.get(logger.name)
            ours = [h for h in logger.handlers if _pytests(h)]
            # A logger first made during the test goes back to a new one's state.
            handlers, level, propagate, disabled = kept or ([], logging.NOTSET, True, False)
            logger.handlers[:] = [h for h in handlers if not _pytests(h)] + ours
            logger.setLevel(level)
            logger.propagate, logger.disabled = propagate, disabled
        logging.disable(self.disabled_level)
        sys.excepthook, threading.excepthook = self.hooks  # type: ignore[assignment]
