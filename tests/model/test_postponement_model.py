"""R8p in the ownership protocol's model (models/ownership.pml,
docs/design/flow-control.md section 3a): a copy a rate limit holds back
beyond the arming horizon waits in the database, and each rule of that move
shown to matter by a mutation Spin must catch.

Its searches are the model's largest (up to 9 GB; tests/conftest.py keeps
this module's tests on one xdist worker, one after the other, so that two of
them never hold that memory at once).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.spin import NO_REPLACE, check

# -- R8p: a copy a rate limit holds back waits in the database ------------------------------

# A postponement is R8's move without a failed attempt, so these checks trade one
# of R8's two returned events for one postponement: with both (MAX_RETURNS=2,
# MAX_POSTPONE=1) the safety search passed 220 million states and 15 GB unfinished.
# With the trade: safety 110 million states (6.9 GB), liveness 113 million (9.2 GB).
POSTPONE = ("MAX_POSTPONE=1", "MAX_RETURNS=1")


def test_a_postponement_keeps_the_safety_invariants(tmp_path: Path) -> None:
    verdict = check(tmp_path, liveness=False, defines=POSTPONE)
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output
    assert "invalid end states\t+" in verdict.output


@pytest.mark.slow
def test_every_postponed_task_settles_while_an_instance_lives(tmp_path: Path) -> None:
    verdict = check(tmp_path, liveness=True, defines=(*POSTPONE, *NO_REPLACE))
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output


@pytest.mark.parametrize(
    "mutation",
    [
        # A copy postponed though its row is inherited (armed by an earlier
        # epoch): unarmed, it is cancelled while a stale owner's copy fires (I1).
        "POSTPONE_INHERITED",
        # The copy put back into memory after the store rewrote its row
        # unarmed: the old revision fires after a cancel of the row (I1).
        "POSTPONE_KEEPS_COPY",
    ],
)
def test_each_postponement_rule_matters(tmp_path: Path, mutation: str) -> None:
    verdict = check(tmp_path, liveness=False, defines=(*POSTPONE, mutation))
    assert verdict.errors >= 1, verdict.output
    assert verdict.violation.startswith("assertion violated"), verdict.output
    assert "cancelled[inc_of[checked]]" in verdict.violation, verdict.output
