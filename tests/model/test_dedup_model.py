"""The dedup window in the ownership protocol's model (models/ownership.pml,
-DDEDUP; docs/design/flow-control.md section 2): R5d writes a task's fired
record in its delete's transaction, and R6 checks for a live record after its
insert. D1: no incarnation of an id fires inside the window of an earlier
one's fire. Each rule shown to matter by a mutation Spin must catch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.spin import NO_REPLACE, check

# -- the dedup window: a fired record, and R6's check after its insert -----------------------

# The bounds of the dedup runs: three client operations (a create that fires, one
# answered ALREADY_FIRED or after the record's expiry, one more) and no replace.
# Safety: 27 million states (1.8 GB, 70 s); with the base model's four operations,
# 148 million (11 GB, 10 minutes). The liveness check also takes one returned event
# instead of two: 18 million states (1.8 GB, 80 s); with two, 48 million (3.5 GB, 6
# minutes on a loaded 2-core machine).
DEDUP = ("DEDUP", "MAX_OPS=3", *NO_REPLACE)
D1 = "inc_of[checked]<=rec_inc"


def test_a_dedup_window_keeps_the_safety_invariants(tmp_path: Path) -> None:
    # D1, and I1-I3 with tasks with and without a window, their records and the
    # fast insert path.
    verdict = check(tmp_path, liveness=False, defines=DEDUP)
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output
    assert "invalid end states\t+" in verdict.output


@pytest.mark.slow
def test_every_task_settles_with_dedup_windows(tmp_path: Path) -> None:
    verdict = check(tmp_path, liveness=True, defines=(*DEDUP, "MAX_RETURNS=1"))
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output


@pytest.mark.parametrize(
    "mutation",
    [
        # R6's check before its insert: it reads no record while R5d still holds
        # the old row, and the insert goes in once R5d commits: the id fires
        # again inside the window.
        "CHECK_BEFORE_INSERT",
        # The fast path (no check of th_fired) for a task without a window after
        # one with a window fired: it fires inside that one's window.
        "FAST_PATH_UNFLAGGED",
        # R5d's record written after its delete committed: a create in between
        # finds no record, and its incarnation fires inside the window.
        "RECORD_APART",
    ],
)
def test_each_dedup_rule_matters(tmp_path: Path, mutation: str) -> None:
    verdict = check(tmp_path, liveness=False, defines=(*DEDUP, mutation))
    assert verdict.errors >= 1, verdict.output
    assert verdict.violation.startswith("assertion violated"), verdict.output
    assert D1 in verdict.violation.replace(" ", ""), verdict.output
