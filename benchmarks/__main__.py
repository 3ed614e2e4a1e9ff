"""The benchmark suite, against the real local MariaDB and RabbitMQ.

    python -m benchmarks [--tasks N] [--quick] [--only SCENARIO ...]
                         [--capacity-rates R,R,...] [--capacity-step-s S]
                         [--database-url URL] [--amqp-url URL]
                         [--driver mysqldb|pymysql] [--out DIR] [--publish DIR]
                         [--trigger-hook PATH]

Scenarios, in this order, each in its own database and exchange (dropped
afterwards): ceilings (benchmarks/ceilings.py), create and delete (library:
benchmarks/engine.py; HTTP: benchmarks/http.py), sending and confirm, burst
(benchmarks/engine.py), precision (benchmarks/precision.py), capacity: steady
rates stepped up until one is not held (benchmarks/capacity.py), precision
under hostile input (benchmarks/hostile.py), takeover after kill -9
(benchmarks/takeover.py), listing and bulk cancel at 1,000,000 pending tasks
(benchmarks/listing.py), firing and single calls at 10,000 and at 10,000,000
pending tasks, and 1,000,000 due in the same second (benchmarks/pending.py),
a backlog drained under a rate limit beside a steady key (benchmarks/throttle.py),
a namespace flooding its create quota beside another's steady firing
(benchmarks/flood.py).
Only when named by ``--only``: ``instances``, burst and steady load with 1, 2
and 3 daemons on the local cluster (``scripts/cluster up --no-daemons`` first;
benchmarks/instances.py); ``dedup``, the steady load without and with a
dedup window on every task, for the window's CPU per fire (benchmarks/dedup.py).
Only with ``--trigger-hook PATH``: ``trigger_hook``,
Trigger Hook's own benchmark program run after the ceilings, its four rates
the base of the ratios to it (benchmarks/peer.py).

The servers: ``--database-url`` and ``--amqp-url``, else the daemon's own
variables TRIGGERHOOK_DATABASE_URL and TRIGGERHOOK_AMQP_URL, else the daemon's
defaults (the local MariaDB and RabbitMQ). The user needs the right to create
and drop databases: each scenario makes its own (th_bench_<hex>; the URL's
database name is not used) and its own exchange and queues.

Writes results.json, results.md and PNG plots to ``--out`` (default
benchmarks/results/<timestamp>/); ``--publish DIR`` also copies results.md and
the plots there (docs/benchmarks for the committed figures). ``--driver``: the
database driver the engine speaks (default: what ``mysql://`` means, mysqlclient
when it is installed); the results name it. ``--quick``: small
sizes for CI (capacity: 500 and 1,000 fires/s, 2 s each, unless
``--capacity-rates``/``--capacity-step-s`` say), targets shown but not judged.
Exit status 1 when a scenario failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks import (
    capacity,
    catalogue,
    ceilings,
    cluster,
    dedup,
    engine,
    flood,
    hostile,
    http,
    instances,
    listing,
    machine,
    peer,
    pending,
    plots,
    precision,
    report,
    takeover,
    throttle,
)
from benchmarks.common import (
    AMQP_URL_VARIABLE,
    DATABASE_URL_VARIABLE,
    DRIVER_VARIABLE,
    Recorder,
    database_url,
    servers,
)
from triggerhook import Settings
from triggerhook.store.mysql import drivers
from triggerhook.store.mysql.connection import driver_of

log = logging.getLogger("benchmarks")

QUICK_TASKS = 2_000
QUICK_PRECISION_S = 3


@dataclass(frozen=True)
class Config:
    tasks: int
    precision_s: int
    fires_per_s: int
    clients: int
    quick: bool
    hostile_s: int = 30
    probes_per_s: int = 200
    capacity_rates: tuple[int, ...] = capacity.RATES
    capacity_step_s: int = capacity.STEP_S


def _scenarios(config: Config, peer_binary: Path | None) -> dict[str, Callable[[Recorder], None]]:
    n, clients = config.tasks, config.clients

    def create(rec: Recorder) -> None:
        with rec.part("library"):
            engine.create(rec, n)
        with rec.part("HTTP"):
            http.create(rec, n, clients)

    def delete(rec: Recorder) -> None:
        with rec.part("library"):
            engine.delete(rec, n)
        with rec.part("HTTP"):
            http.delete(rec, n, clients)

    scenarios: dict[str, Callable[[Recorder], None]] = {
        "ceilings": lambda rec: ceilings.run(rec, n),
        "create": create,
        "delete": delete,
        "sending": lambda rec: engine.sending(rec, n),
        "burst": lambda rec: engine.burst(rec, n),
        "near_due": lambda rec: engine.near_due(rec, 5 if config.quick else 20, 200),
        "precision": lambda rec: precision.run(
            rec, config.precision_s, config.fires_per_s, clients
        ),
        "capacity": lambda rec: capacity.run(rec, config.capacity_rates, config.capacity_step_s),
        "hostile": lambda rec: hostile.run(
            rec, config.hostile_s, config.probes_per_s, config.quick
        ),
        "takeover": lambda rec: takeover.run(rec, 5 if config.quick else 20, 200, config.quick),
        "listing": lambda rec: listing.run(
            rec, *((20_000, 5_000, 10) if config.quick else (1_000_000, 100_000, 60))
        ),
        "dedup": lambda rec: dedup.run(rec, config.precision_s, config.fires_per_s, clients),
        "throttle": lambda rec: throttle.run(
            rec, throttle.QUICK if config.quick else throttle.FULL
        ),
        "flood": lambda rec: flood.run(rec, flood.QUICK if config.quick else flood.FULL),
        "pending": lambda rec: pending.run(
            rec, pending.QUICK_LEVELS if config.quick else pending.LEVELS, config.precision_s
        ),
        "instances": lambda rec: instances.run(
            rec,
            burst_n=instances.QUICK_BURST_N if config.quick else instances.BURST_N,
            rates=instances.QUICK_RATES if config.quick else instances.RATES,
            step_s=instances.QUICK_STEP_S if config.quick else instances.STEP_S,
        ),
        "same_second": lambda rec: (
            pending.same_second(rec, pending.QUICK_BURST_N, pending.QUICK_MAX_IN_MEMORY)
            if config.quick
            else pending.same_second(rec, pending.BURST_N)
        ),
    }
    if peer_binary is not None:  # --trigger-hook PATH
        binary = peer_binary
        scenarios["trigger_hook"] = lambda rec: peer.run(rec, binary, n)
    return scenarios


def _run(name: str, scenario: Callable[[Recorder], None]) -> Recorder:
    rec = Recorder(name)
    log.warning("benchmark %s: running", name)
    started = time.perf_counter()
    with rec.part(name):
        scenario(rec)
    rec.elapsed_s = time.perf_counter() - started
    state = "FAILED: " + "; ".join(rec.errors) if rec.errors else "done"
    log.warning("benchmark %s: %s in %.1f s", name, state, rec.elapsed_s)
    return rec


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks per scenario")
    parser.add_argument("--precision-s", type=int, default=60, help="seconds of steady load")
    parser.add_argument("--fires-per-s", type=int, default=1000, help="steady load rate")
    parser.add_argument("--clients", type=int, default=32, help="concurrent HTTP clients")
    parser.add_argument(
        "--capacity-rates",
        type=_rates,
        help="capacity's steps, fires/s (default: 1000,2000,4000,8000,16000)",
    )
    parser.add_argument("--capacity-step-s", type=int, help="seconds a capacity step (default 20)")
    parser.add_argument("--quick", action="store_true", help="small sizes for CI, no targets")
    parser.add_argument(
        "--only", nargs="+", choices=catalogue.SCENARIOS, default=catalogue.DEFAULT_SCENARIOS
    )
    parser.add_argument(
        "--database-url",
        help=f"the MariaDB/MySQL server (default: {DATABASE_URL_VARIABLE}, else the daemon's)",
    )
    parser.add_argument(
        "--amqp-url", help=f"the RabbitMQ server (default: {AMQP_URL_VARIABLE}, else the daemon's)"
    )
    parser.add_argument("--driver", choices=drivers.NAMES, help="default: mysql:// decides")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/<timestamp>")
    parser.add_argument("--publish", type=Path, help="also copy results.md and plots here")
    parser.add_argument(
        "--trigger-hook",
        type=Path,
        metavar="PATH",
        help="Trigger Hook's benchmark program (scripts/trigger-hook-build): run it too, "
        "and take the ratios to it from this run",
    )
    args = parser.parse_args(argv)
    peer_binary = args.trigger_hook
    if peer_binary is not None and not (peer_binary.is_file() and os.access(peer_binary, os.X_OK)):
        parser.error(f"--trigger-hook: {args.trigger_hook} is not an executable file")
    if "trigger_hook" in args.only and args.trigger_hook is None:
        parser.error("--only trigger_hook needs --trigger-hook PATH")
    if args.trigger_hook is not None and "trigger_hook" not in args.only:
        args.only = [*args.only, "trigger_hook"]
    for name in ("tasks", "precision_s", "fires_per_s", "clients", "capacity_step_s"):
        value = getattr(args, name)
        if value is not None and value < 1:  # None: not given, the default
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def _rates(text: str) -> tuple[int, ...]:
    """``--capacity-rates``: a comma list of positive integers, stepped up in order."""
    try:
        rates = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: {text!r}") from None
    if rates[0] < 1:
        raise argparse.ArgumentTypeError("rates must be at least 1")
    return tuple(rates)


def _config(args: argparse.Namespace) -> Config:
    if args.quick:
        config = Config(
            QUICK_TASKS,
            QUICK_PRECISION_S,
            args.fires_per_s,
            args.clients,
            True,
            hostile_s=QUICK_PRECISION_S,
            capacity_rates=capacity.QUICK_RATES,
            capacity_step_s=capacity.QUICK_STEP_S,
        )
    else:
        config = Config(args.tasks, args.precision_s, args.fires_per_s, args.clients, False)
    return replace(
        config,
        capacity_rates=args.capacity_rates or config.capacity_rates,
        capacity_step_s=args.capacity_step_s or config.capacity_step_s,
    )


def _meta(config: Config, argv: list[str], wall_s: float, scenarios: list[str]) -> dict[str, Any]:
    settings = {
        k: v
        for k, v in asdict(Settings()).items()
        if not any(secret in k for secret in ("token", "password", "url"))
    }
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(["python -m benchmarks", *argv]),
        "wall_s": round(wall_s, 1),
        "machine": machine.machine(),
        "servers": {
            **servers(),
            "innodb_buffer_pool_mib": machine.buffer_pool_mib(),
            **({"cluster": cluster.SERVERS} if "instances" in scenarios else {}),
        },
        "versions": {**machine.versions(), "driver": _driver()},
        "commit": machine.commit(),
        "config": {**asdict(config), "engine_settings": settings},
    }


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    # Read by isolated() and the connections, here and in the worker processes.
    for variable, value in (
        (DRIVER_VARIABLE, args.driver),
        (DATABASE_URL_VARIABLE, args.database_url),
        (AMQP_URL_VARIABLE, args.amqp_url),
    ):
        if value:
            os.environ[variable] = value
    config = _config(args)
    out = args.out or Path("benchmarks/results") / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    scenarios = _scenarios(config, args.trigger_hook)
    recorders = [_run(name, scenarios[name]) for name in catalogue.SCENARIOS if name in args.only]
    wall_s = time.perf_counter() - started
    meta = _meta(config, argv, wall_s, [rec.scenario for rec in recorders])
    more = [s for rec in recorders if rec.scenario == "instances" for s in instances.specs(rec)]
    rows = report.evaluate(recorders, config.quick, more)
    pictures, plot_error = _draw(recorders, out)
    meta.update(plots=[p.name for p in pictures], plot_error=plot_error)
    (out / "results.json").write_text(report.to_json(rows, recorders, meta))
    text = report.markdown(rows, recorders, meta, pictures)
    (out / "results.md").write_text(text)
    if args.publish:
        args.publish.mkdir(parents=True, exist_ok=True)
        for path in [out / "results.md", *pictures]:
            shutil.copy2(path, args.publish / path.name)
    print(text)
    print(f"(written to {out}; wall time {wall_s:,.0f} s)")
    return 1 if plot_error or any(rec.errors for rec in recorders) else 0


def _driver() -> str:
    driver = driver_of(database_url("x"))
    return f"{driver.package} {driver.version}"


def _draw(recorders: list[Recorder], out: Path) -> tuple[list[Path], str | None]:
    """The plots, or the reason there are none (the figures are written anyway)."""
    try:
        drawn = plots.draw(recorders, out)
        for rec in recorders:
            if rec.scenario == "instances" and (path := instances.draw(rec, out)):
                drawn.append(path)
        return drawn, None
    except Exception as exc:
        log.exception("plotting failed")
        return [], f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    sys.exit(main())
