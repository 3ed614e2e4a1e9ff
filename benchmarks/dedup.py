"""What the dedup window costs a fire (issue 32, item 2;
docs/design/flow-control.md, section 2).

The precision scenario's steady load (R fires/s for S seconds, no HTTP load)
twice in one run, each in its own database and daemon: tasks without a
window, then every task with a window of an hour, so that each delete after
the confirm writes a fired record in its transaction (R5d), and every create
takes the locked path (the fast insert ends once a window was written).
Reported: CPU per fired task of the daemon and of MariaDB for each, and the
difference (the cost of the window, same run, same machine). The sweep is
not in it (records expire an hour later): it deletes them in batches of
1,000 by an index range, once per interval.
"""

from __future__ import annotations

from benchmarks import precision
from benchmarks.common import Recorder

WINDOW_MS = 3_600_000

RUNS = (
    precision.Run("dedup.none", "steady load, no dedup window", False, {}),
    precision.Run(
        "dedup.windowed",
        "steady load, every task with a dedup window",
        False,
        {},
        {"dedup_window_ms": WINDOW_MS},
    ),
)


def run(rec: Recorder, seconds: int, fires_per_s: int, clients: int) -> None:
    for how in RUNS:
        with rec.part(how.label):
            precision.run_once(rec, how, seconds, fires_per_s, clients)
    for who in ("daemon", "mariadb", "both"):
        none = rec.value(f"dedup.none.cpu_{who}_us")
        windowed = rec.value(f"dedup.windowed.cpu_{who}_us")
        if none is not None and windowed is not None:
            rec.add(
                f"dedup.cpu_{who}_added_us",
                windowed - none,
                "every task windowed, less none, in the same run",
            )
