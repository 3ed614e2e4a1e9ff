"""The ownership protocol's model (models/ownership.pml, docs/design/ownership.md),
checked with Spin: exhaustively for its assertions (I1-I3) and for its LTL
property (I4: the task settles), and each rule shown to matter by a mutation
the checker must catch.

Spin and gcc come from Debian (``scripts/test`` installs them). The bounded
budgets of the model (client operations, lease lapses, returned events,
releases, replaces) make every run end, so I4 is checked without a fairness
assumption: a run that gets stuck with the task still stored is an acceptance cycle.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.spin import NO_REPLACE, check


def test_the_protocol_keeps_its_safety_invariants(tmp_path: Path) -> None:
    verdict = check(tmp_path, liveness=False)
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output
    assert "invalid end states\t+" in verdict.output  # deadlocks checked too


@pytest.mark.slow
def test_every_task_settles_while_an_instance_lives(tmp_path: Path) -> None:
    verdict = check(tmp_path, liveness=True, defines=NO_REPLACE)
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output
    assert "never claim         \t+ (settles)" in verdict.output


@pytest.mark.parametrize(
    ("mutation", "violated"),
    [
        # v1's delete by id removes a newer incarnation whose event never went out (I2).
        ("DELETE_BY_ID", "published[rev]"),
        # A row armed in an earlier epoch unarmed on its return: a stale owner's copy
        # fires after a cancel answered CANCELLED (I1).
        ("UNARM_INHERITED", "cancelled[inc_of[checked]]"),
        # A stale owner's rewrite of a returned event, unfenced: the same (I1).
        ("UNFENCED_REWRITE", "cancelled[inc_of[checked]]"),
        # Cancel of an armed row (I1).
        ("CANCEL_ARMED", "cancelled[inc_of[checked]]"),
        # Replace (R6r) of an armed row: the copy in memory fires after REPLACED (I1).
        ("REPLACE_ARMED", "replaced[checked]"),
    ],
)
def test_each_safety_rule_matters(tmp_path: Path, mutation: str, violated: str) -> None:
    verdict = check(tmp_path, liveness=False, defines=(mutation,))
    assert verdict.errors >= 1, verdict.output
    assert verdict.violation.startswith("assertion violated"), verdict.output
    assert violated in verdict.violation, verdict.output


@pytest.mark.parametrize(
    "mutation",
    [
        # Without it an owner whose lease lapsed while nobody else could take
        # the shard (the other instance crashed) holds the task forever (I4).
        "NO_RENEW",
        # An arming pass that committed though its answer was lost, forgotten:
        # the row stays armed in no one's memory while its owner lives (I4; R3a).
        "FORGET_UNANSWERED",
    ],
)
def test_each_liveness_rule_matters(tmp_path: Path, mutation: str) -> None:
    verdict = check(tmp_path, liveness=True, defines=(*NO_REPLACE, mutation))
    assert verdict.errors >= 1, verdict.output
    assert verdict.violation.startswith("acceptance cycle"), verdict.output


# -- a series (R5s): the confirm of an occurrence writes the next one ----------------------

# The bounds of the series runs: two occurrences, fewer client operations and
# returns than the base model (the series' revisions multiply the states).
SERIES = ("SERIES", "MAX_OCC=2", "MAX_OPS=3", "MAX_RETURNS=1")


def test_a_series_keeps_its_invariants(tmp_path: Path) -> None:
    # I1s (after CANCELLED only duplicates of occurrences published before),
    # I2 (an occurrence is replaced only after its event was confirmed: none
    # skipped), S2 (a stop ends the series after the occurrence it came too late for).
    verdict = check(tmp_path, liveness=False, defines=SERIES)
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output


@pytest.mark.slow
def test_every_series_settles_while_an_instance_lives(tmp_path: Path) -> None:
    verdict = check(tmp_path, liveness=True, defines=(*SERIES, *NO_REPLACE))
    assert verdict.errors == 0, verdict.output
    assert verdict.complete, verdict.output


@pytest.mark.parametrize(
    ("mutation", "violated"),
    [
        # A stale confirm advances the row past an occurrence never published (I2).
        ("ADVANCE_BY_ID", "published[rev]"),
        # The advance ignores a stop: an occurrence after it fires (S2).
        ("STOP_IGNORED", "occ_of[checked]<=stop_after"),
    ],
)
def test_each_series_rule_matters(tmp_path: Path, mutation: str, violated: str) -> None:
    verdict = check(tmp_path, liveness=False, defines=(*SERIES, mutation))
    assert verdict.errors >= 1, verdict.output
    assert violated in verdict.violation.replace(" ", ""), verdict.output
