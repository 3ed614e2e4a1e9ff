"""``scripts/sim`` (or ``PYTHONPATH=tests python -m sim``): run the simulator.

    scripts/sim                       100 seeds over the memory store
    scripts/sim --seeds 5000          the long mode: thousands of seeds
    scripts/sim --store sqlite --seeds 50
    scripts/sim --store mysql --seeds 3 --fault-s 20   MariaDB (TRIGGERHOOK_TEST_MYSQL)
    scripts/sim --seed 1234           one seed: its outcome, and its trace if it fails
    scripts/sim --limit "10/s burst 2" --backlog 80 --seeds 40   a queue past memory (R8p)

Exit status 0 when every run held every promise, 1 when one did not (its
seed, the violation and the last steps are printed), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import time

from sim.backends import BACKENDS
from sim.faults import FaultRates
from sim.world import SimConfig, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/sim", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=BACKENDS, default="memory")
    parser.add_argument("--seed", type=int, help="run this seed only (a replay)")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds (default 100)")
    parser.add_argument("--first", type=int, default=1, help="the first seed (default 1)")
    parser.add_argument("--fault-s", type=float, default=40.0, help="simulated seconds of faults")
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument(
        "--no-arm-lost-answers",
        action="store_true",
        help="no lost answers of arming passes (for code whose stores keep R3a themselves)",
    )
    parser.add_argument(
        "--db-clock-steps-back",
        action="store_true",
        help="the database's clock may also step back (it fires early then: a known limit)",
    )
    parser.add_argument(
        "--limit", default=SimConfig().limit, help="the limited key's rate (default %(default)r)"
    )
    parser.add_argument(
        "--backlog", type=int, default=0, help="tasks on the limited key due at one instant"
    )
    parser.add_argument(
        "--no-rate-check", action="store_true", help="the oracle does not check the rate"
    )
    parser.add_argument("--keep-going", action="store_true", help="do not stop at a failure")
    parser.add_argument("--last", type=int, default=80, help="trace lines shown (default 80)")
    parser.add_argument("--about", help="also show every trace line naming this (an id)")
    args = parser.parse_args(argv)
    config = SimConfig(
        store=args.store,
        instances=args.instances,
        fault_ms=int(args.fault_s * 1000),
        rates=FaultRates(arm_after=not args.no_arm_lost_answers),
        clock_steps_back=args.db_clock_steps_back,
        limit=args.limit,
        backlog=args.backlog,
        rate_check=not args.no_rate_check,
    )
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    failed = 0
    started = time.monotonic()
    for seed in seeds:
        outcome = run(seed, config, None if args.seed is not None else 400)
        if outcome.violation is None and args.seed is None:
            continue
        sys.stdout.write(outcome.report(args.last, args.about) + "\n")
        sys.stdout.flush()
        if outcome.violation is not None:
            failed += 1
            if not args.keep_going:
                break
    elapsed_s = time.monotonic() - started
    sys.stdout.write(f"{len(seeds)} seeds over {args.store}: {failed} failed, {elapsed_s:.1f} s\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
