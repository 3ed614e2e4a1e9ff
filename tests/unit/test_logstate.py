"""The suite's logging reset (tests/support/logstate.py): what one test leaves
on a logger does not print into the next test's capture."""

from __future__ import annotations

import io
import logging

import pytest
from support.logstate import LoggingState

from triggerhook import logs


def test_a_handler_left_on_a_closed_stream_is_taken_away(
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = LoggingState.taken()
    closed = io.StringIO()
    try:
        logs.configure("info")  # the root's handler on this moment's stderr
        logging.getLogger("triggerhook.a.leak").addHandler(logging.StreamHandler(closed))
        logging.getLogger("triggerhook").setLevel(logging.CRITICAL)
        logging.disable(logging.WARNING)
    finally:
        state.restore()
    closed.close()
    logging.getLogger("triggerhook.a.leak").warning("after the reset")
    assert "Logging error" not in capsys.readouterr().err
    assert logging.getLogger("triggerhook").level == logging.NOTSET
    assert logging.root.manager.disable == logging.NOTSET
    assert not logging.getLogger("triggerhook.a.leak").handlers
