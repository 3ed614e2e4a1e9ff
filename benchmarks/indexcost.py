"""What bounds confirm: a deleted row's cost in ``th_tasks``, by its indexes.

    python -m benchmarks.indexcost [ROWS] [ROUNDS]      (default 100,000 and 3)

The raw batched DELETE of the ceilings (2,000 ids a statement, a commit
each, one connection) on ``th_tasks`` as the schema makes it, and with parts
of its indexing removed, each in a database of its own (dropped afterwards),
the variants in turns. It prints rows/s per variant and round, then the
medians (docs/benchmarks/levers.md, "Confirm, bounded by what a deleted row
costs in this schema").
"""

from __future__ import annotations

import statistics
import sys

from benchmarks.ceilings import raw_delete, raw_insert
from benchmarks.common import isolated
from triggerhook.store.mysql.connection import open_connection, target

_NO_FK = "ALTER TABLE th_task_tags DROP FOREIGN KEY th_task_tags_task"
_LISTING_AND_GEN = "DROP KEY th_tasks_gen, DROP KEY th_tasks_listed, DROP KEY th_tasks_key"
VARIANTS: dict[str, list[str]] = {
    "as the schema makes it": [],
    "without th_task_tags' foreign key": [_NO_FK],
    "primary key + the arming index only": [_NO_FK, f"ALTER TABLE th_tasks {_LISTING_AND_GEN}"],
    "primary key only": [
        _NO_FK,
        f"ALTER TABLE th_tasks {_LISTING_AND_GEN}, DROP KEY th_tasks_fire",
    ],
}


def delete_rate(alters: list[str], n: int) -> float:
    """Rows/s of the raw batched DELETE of ``n`` rows after ``alters``."""
    with isolated() as place:
        db = open_connection(target(place.settings.database_url))
        try:
            cur = db.cursor()
            for statement in alters:
                cur.execute(statement)
            ids, _due_ms, _insert_s = raw_insert(db, n)
            return n / raw_delete(db, ids)
        finally:
            db.close()


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 100_000
    rounds = int(argv[1]) if len(argv) > 1 else 3
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_no in range(1, rounds + 1):
        for name, alters in VARIANTS.items():
            rates[name].append(delete_rate(alters, n))
            print(f"round {round_no}, {name}: {rates[name][-1]:,.0f} rows/s", flush=True)
    for name, values in rates.items():
        print(f"{name}: median {statistics.median(values):,.0f} rows/s")


if __name__ == "__main__":
    main(sys.argv[1:])
