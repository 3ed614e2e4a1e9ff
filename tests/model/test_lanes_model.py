"""Lanes in the ownership protocol's model (models/lanes.pml,
docs/design/flow-control.md section 3b): a task id whose row is in either of
two shards (its home shard, or the rate-limited lane's), each owned in turn by
two instances; writes by id lock both candidate shard rows, and a replace may
move the row. Each rule shown to matter by a mutation Spin must catch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.spin import LANES, check

# Two shards multiply the ownership states: at the base model's bounds (4
# client operations, 2 lapses, 2 replaces) the safety search took 277 million
# states, 18 GB and 10 minutes; at these, 9 million (0.7 GB, 10 s).
BOUNDS = ("MAX_OPS=3", "MAX_EXPIRE=1", "MAX_REPLACE=1")


def test_lanes_keep_the_safety_invariants(tmp_path: Path) -> None:
    verdict = check(tmp_path, liveness=False, defines=BOUNDS, model=LANES)
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output
    assert "invalid end states\t+" in verdict.output


@pytest.mark.slow
def test_every_task_settles_in_either_lane(tmp_path: Path) -> None:
    verdict = check(tmp_path, liveness=True, defines=BOUNDS, model=LANES)
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output
    assert "never claim         \t+ (settles)" in verdict.output


def test_a_write_by_id_must_lock_both_candidate_shards(tmp_path: Path) -> None:
    # Only the home shard locked: the other lane's owner arms the row between
    # the cancel's check and its delete, and the copy fires after CANCELLED (I1).
    verdict = check(tmp_path, liveness=False, defines=(*BOUNDS, "LOCK_HOME_ONLY"), model=LANES)
    assert verdict.errors >= 1, verdict.output
    assert "cancelled[inc_of[checked]]" in verdict.violation, verdict.output


def test_a_moved_row_is_written_unarmed_in_its_new_shard(tmp_path: Path) -> None:
    # The row keeps its old generation across lanes: it counts as armed by a
    # pass that never read it, in no one's memory, and never fires while its
    # owner lives (I4).
    verdict = check(tmp_path, liveness=True, defines=(*BOUNDS, "MOVE_KEEPS_GEN"), model=LANES)
    assert verdict.errors >= 1, verdict.output
    assert verdict.violation.startswith("acceptance cycle"), verdict.output
