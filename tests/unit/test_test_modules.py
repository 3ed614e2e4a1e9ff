"""The test tree's own rule: with pytest's default import mode, two test
modules of one basename in different tiers cannot both be collected in one
run (CI's run of every tier failed once on tests/unit and tests/integration
each holding a test_series_life.py); this tier, run first, names any such pair."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_basename_of_its_own() -> None:
    where: defaultdict[str, list[str]] = defaultdict(list)
    for module in sorted(TESTS.rglob("test_*.py")):
        where[module.name].append(str(module.relative_to(TESTS)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert shared == {}, shared
