"""Galera's status as the daemon reads it, and the watch that warns when
writes reach more than one node (pure: a fake read and a fake clock)."""

from __future__ import annotations

import logging

import pytest

from triggerhook.errors import StoreUnavailable
from triggerhook.store.mysql.galera import GaleraStatus, GaleraWatch, status_of


@pytest.mark.parametrize(
    ("rows", "status"),
    [
        ([], None),  # MySQL: no such status
        ([("wsrep_cluster_size", "0"), ("wsrep_local_bf_aborts", "0")], None),  # no provider
        (
            [
                ("wsrep_cluster_size", "3"),
                ("wsrep_local_cert_failures", "2"),
                ("wsrep_local_bf_aborts", b"5"),
            ],
            GaleraStatus(3, 7),
        ),
        ([("WSREP_CLUSTER_SIZE", "1")], GaleraStatus(1, 0)),
    ],
)
def test_the_status_from_show_status_rows(
    rows: list[tuple[object, object]], status: GaleraStatus | None
) -> None:
    assert status_of(rows) == status


class Reads:
    def __init__(self, *answers: GaleraStatus | Exception | None) -> None:
        self.answers = list(answers)
        self.count = 0

    def __call__(self) -> GaleraStatus | None:
        self.count += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_growing_conflicts_are_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    reads = Reads(GaleraStatus(3, 4), GaleraStatus(3, 4), GaleraStatus(3, 6), GaleraStatus(3, 6))
    watch = GaleraWatch(reads, interval_s=10, clock_s=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="triggerhook.store.mysql.galera"):
        assert watch.figures() == {"galera_conflicts": 4}  # the first read
        assert watch.figures() == {"galera_conflicts": 4}  # within the interval: no read
        assert reads.count == 1
        for _ in range(3):
            now[0] += 10
            watch.figures()
    assert reads.count == 4
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage().split(";")[0] for r in warnings] == [
        "database: writes reached more than one Galera node (2 certification conflicts on "
        "this node since the last check)"
    ]
    assert "cluster of 3 nodes" in caplog.records[0].getMessage()


def test_no_galera_is_read_once_and_shows_nothing() -> None:
    now = [0.0]
    reads = Reads(None)
    watch = GaleraWatch(reads, interval_s=10, clock_s=lambda: now[0])
    for _ in range(5):
        assert watch.figures() == {}
        now[0] += 10
    assert reads.count == 1


def test_an_unreadable_node_keeps_the_last_figure_and_tries_again() -> None:
    now = [0.0]
    reads = Reads(GaleraStatus(3, 1), StoreUnavailable("down"), GaleraStatus(3, 1))
    watch = GaleraWatch(reads, interval_s=10, clock_s=lambda: now[0])
    assert watch.figures() == {"galera_conflicts": 1}
    now[0] += 10
    assert watch.figures() == {"galera_conflicts": 1}  # the read failed
    now[0] += 10
    assert watch.figures() == {"galera_conflicts": 1}
    assert reads.count == 3


def test_a_restarted_node_counting_from_zero_is_no_conflict(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    reads = Reads(GaleraStatus(3, 5), GaleraStatus(3, 0), GaleraStatus(3, 1))
    watch = GaleraWatch(reads, interval_s=10, clock_s=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="triggerhook.store.mysql.galera"):
        watch.figures()
        now[0] += 10
        assert watch.figures() == {"galera_conflicts": 0}
        assert not caplog.records
        now[0] += 10
        watch.figures()  # and growth from there is
    assert len(caplog.records) == 1
