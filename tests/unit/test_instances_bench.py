"""The pure helpers of the benchmark scenario across instances
(benchmarks/instances.py): no cluster needed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # benchmarks/ is not installed: it runs from the repository
    sys.path.insert(0, str(REPO))

from benchmarks import capacity, cluster, instances  # noqa: E402
from benchmarks.common import CpuMeter, Recorder  # noqa: E402

NAMES = ["bench-instances-1", "bench-instances-2", "bench-instances-3"]


def test_shards_are_spread_when_every_one_is_owned_by_the_daemons_within_their_share() -> None:
    assert cluster.spread({NAMES[0]: 22, NAMES[1]: 22, NAMES[2]: 20}, NAMES, 64)
    assert cluster.spread({NAMES[0]: 64}, NAMES[:1], 64)


def test_shards_are_not_spread_while_one_is_free_or_a_daemon_has_none_or_too_many() -> None:
    assert not cluster.spread({NAMES[0]: 22, NAMES[1]: 22, NAMES[2]: 19}, NAMES, 64)
    assert not cluster.spread({NAMES[0]: 32, NAMES[1]: 32}, NAMES, 64)
    assert not cluster.spread({NAMES[0]: 24, NAMES[1]: 20, NAMES[2]: 20}, NAMES, 64)
    assert not cluster.spread({NAMES[0]: 32, "someone-else": 32}, NAMES[:2], 64)


def test_each_daemon_gets_every_broker_node_its_own_first() -> None:
    def ports(i: int) -> list[str]:
        return [url.split(":")[3].split("/")[0] for url in cluster.amqp_urls(i).split()]

    assert ports(1) == ["5681", "5682", "5683"]
    assert ports(2) == ["5682", "5681", "5683"]
    assert ports(3) == ["5683", "5681", "5682"]
    assert ports(4) == ports(1)


def test_a_step_is_held_only_by_capacitys_criteria() -> None:
    assert capacity.not_held(5.0, 0, 0, 2.0) == []
    assert capacity.not_held(5.1, 1, 2, 2.1) == [
        "p99 5.1 ms > 5 ms",
        "1 early",
        "2 not received",
        "backlog grew",
    ]


def test_the_fixed_figures_have_a_spec_each_for_one_two_and_three_daemons() -> None:
    keys = [spec.key for spec in instances.SPECS]
    assert len(keys) == len(set(keys))
    for k in (1, 2, 3):
        assert f"instances.{k}.burst_tasks_per_s" in keys
        assert f"instances.{k}.burst_p99_ms" in keys
        assert f"instances.{k}.held_fires_per_s" in keys
    assert {spec.scenario for spec in instances.SPECS} == {"instances"}
    assert all(spec.target is None for spec in instances.SPECS)


def _recorded() -> Recorder:
    rec = Recorder("instances")
    for k, tasks_per_s, held in ((1, 9000.0, 2000.0), (2, 11000.0, 2000.0), (3, 12000.0, 1000.0)):
        rec.add(f"instances.{k}.burst_tasks_per_s", tasks_per_s)
        rec.add(f"instances.{k}.burst_s", 2.0)
        rec.add(f"instances.{k}.held_fires_per_s", held)
        for name in instances.BURST_GROUPS.values():
            rec.add(f"instances.{k}.burst_cpu_{name}_s", 1.0)
        rec.add(f"instances.{k}.1000.fired_p99", 3.0)
        rec.add(f"instances.{k}.1000.cpu_daemons_per_1k_s", 0.3)
    return rec


def test_the_per_step_figures_get_their_specs() -> None:
    specs = instances.specs(_recorded())[len(instances.SPECS) :]
    assert [spec.key for spec in specs][:2] == [
        "instances.1.1000.fired_p99",
        "instances.1.1000.cpu_daemons_per_1k_s",
    ]
    assert len(specs) == 6
    assert specs[0].label == "1 daemon, 1,000 fires/s: lateness p99 (x-fired - x-due)"


def test_the_plot_is_drawn_from_the_figures(tmp_path: Path) -> None:
    path = instances.draw(_recorded(), tmp_path)
    assert path == tmp_path / "instances.png"
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_no_plot_without_figures(tmp_path: Path) -> None:
    assert instances.draw(Recorder("instances"), tmp_path) is None


def _fake_steps(
    monkeypatch: pytest.MonkeyPatch, late: Callable[[int, int], bool]
) -> list[tuple[int, float]]:
    """capacity._step replaced: posted late when ``late(rate, attempt)``, else
    held, its posting at 9,000 tasks/s. Returns (rate, post_per_s) per call."""
    calls: list[tuple[int, float]] = []

    def step(fires_per_s: int, seconds: int, post_per_s: float) -> capacity.Step:
        calls.append((fires_per_s, post_per_s))
        if late(fires_per_s, sum(rate == fires_per_s for rate, _ in calls)):
            raise capacity.PostedLate(3_000.0, 120.0)
        cpu = CpuMeter({}, servers=False)
        return capacity.Step(fires_per_s, seconds, 0, [], [], cpu, 0, 9_000.0)

    monkeypatch.setattr(capacity, "_step", step)
    monkeypatch.setattr(capacity, "_record", lambda rec, step: [])  # every step held
    return calls


def test_a_step_posted_late_is_tried_again_with_the_lead_its_posting_asks_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _fake_steps(monkeypatch, lambda rate, attempt: rate == 2_000 and attempt == 1)
    rec = Recorder("capacity")
    capacity.run(rec, [1_000, 2_000, 4_000], 1)
    margin = capacity.POST_MARGIN
    assert calls == [
        (1_000, capacity.POST_TASKS_PER_S / margin),
        (2_000, 9_000 / margin),  # as fast as the last posting went
        (2_000, 3_000 / margin),  # as fast as this one went
        (4_000, 9_000 / margin),
    ]
    assert rec.errors == []
    [held] = rec.figures
    assert held.value == 4_000


def test_a_load_generator_that_stays_behind_leaves_the_step_not_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _fake_steps(monkeypatch, lambda rate, attempt: rate >= 4_000)
    rec = Recorder("capacity")
    capacity.run(rec, [1_000, 2_000, 4_000, 8_000], 1)
    assert [rate for rate, _ in calls] == [1_000, 2_000, 4_000, 4_000]  # then it stopped
    assert rec.errors == []
    [held] = rec.figures
    assert held.value == 2_000
    assert "4,000/s not measured: the load generator fell behind" in held.detail
    assert "the capacity may be higher" in held.detail
