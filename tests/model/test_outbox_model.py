"""The outbox's model (models/outbox.pml, docs/design/flow-control.md section 6):
callers that schedule a task inside their own transaction and commit or roll
back, and R6o's movers that move the committed outbox rows into th_tasks,
checked with Spin: exhaustively for its assertions (I1o: no task without its
caller's commit; I2o: each outbox row moved once) and for its LTL property
(the outbox empties while a mover lives), and each rule shown to matter by a
mutation the checker must catch.

The searches are small (under 20,000 states, a second each).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.spin import OUTBOX, check


def test_the_outbox_keeps_its_safety_invariants(tmp_path: Path) -> None:
    verdict = check(tmp_path, liveness=False, model=OUTBOX)
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output
    assert "invalid end states\t+" in verdict.output  # deadlocks checked too


def test_every_committed_outbox_row_is_moved_while_a_mover_lives(tmp_path: Path) -> None:
    verdict = check(tmp_path, liveness=True, model=OUTBOX)
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output
    assert "never claim         \t+ (empties)" in verdict.output


@pytest.mark.parametrize(
    ("mutation", "violated"),
    [
        # The mover sees a row of a caller still in its transaction: the task
        # is created before the commit, and stays if the caller rolls back (I1o).
        ("READ_UNCOMMITTED", "committed[src_of[task_inc]]"),
        # The outbox row deleted in a transaction of its own after the
        # insert's: in the pause between (or after a crash there) another
        # mover moves the row again, a second incarnation once the first fired (I2o).
        ("DELETE_APART", "moved[c]==0"),
        # A read without FOR UPDATE: two movers take the same row (I2o).
        ("NO_LOCK", "moved[c]==0"),
    ],
)
def test_each_outbox_rule_matters(tmp_path: Path, mutation: str, violated: str) -> None:
    verdict = check(tmp_path, liveness=False, defines=(mutation,), model=OUTBOX)
    assert verdict.errors >= 1, verdict.output
    assert verdict.violation.startswith("assertion violated"), verdict.output
    assert violated in verdict.violation.replace(" ", ""), verdict.output


def test_a_stopped_mover_must_not_keep_its_locks(tmp_path: Path) -> None:
    # A mover stopped for good whose transaction the server never ends (no
    # R10 timeout) keeps its rows locked: SKIP LOCKED skips them forever.
    verdict = check(tmp_path, liveness=True, defines=("KEEP_LOCKS",), model=OUTBOX)
    assert verdict.errors >= 1, verdict.output
    assert verdict.violation.startswith("acceptance cycle"), verdict.output
