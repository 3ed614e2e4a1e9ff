"""Imports point down: the layers of ``triggerhook/``, lowest first.

    0  errors, retry           leaves: the error classes, the one back-off policy
    1  runtime/                the ground floor: Worker (thread base), counters, metric points
       domain/                 pure: Task and validation, time parsing, the due-time heap
    2  interfaces, settings    the ports (protocols and the values they carry); every setting
       clock, logs, ratelimit, sdnotify, status, tomlfile
                               small leaves the core, the adapters and the daemon use
    3  engine/                 the core: threads and bounded stages
       store/, amqp/, metrics/ the adapters (MySQL, RabbitMQ, metrics thread and sinks)
       local/                  the adapter for ``triggerhook dev``: events to stdout, a webhook
       client/                 the HTTP client: a re-export of triggerhook_client (below)
    4  app                     the library API: the façade over the engine and metrics
       webhook/                webhook targets: a consumer (amqp/) POSTing through local/'s sink
    5  api/                    HTTP and AMQP commands, over the app
       processes               the daemon's firing and API processes, and their channel
    6  service                 the daemon: runs the app and the interfaces
    7  wiring                  the composition root: everything built from Settings
    8  cli, triggerhook        the command; the package's public names (__init__)
    9  __main__                ``python -m triggerhook``

The order is what the code needs: retry sits below runtime because Worker backs
off with it; runtime and domain need nothing of each other; interfaces carries
domain Tasks and runtime Points, settings checks ids with domain patterns; the
engine and adapters meet only through interfaces; app drives the engine and
metrics; api drives the app (and takes the broker side of the command queue
from amqp, below it); service runs the daemon's parts, and wiring builds them
all; cli runs the daemon and the client.

The rules, checked over every ``import`` and ``from ... import`` of
``triggerhook.*`` anywhere in a module (inside functions and under
``TYPE_CHECKING`` too):

* A module imports only from its own package (or module) or a lower layer.
  Packages and modules of one layer do not know each other: the engine never
  imports store, amqp or metrics, and they never import the engine; what they
  share (Worker, counters, points, EngineStats, the FiredSource port) lives in
  runtime/ or interfaces.py. There are no documented exceptions.
* Layers 0-2 import nothing but the standard library besides ``triggerhook``,
  and what the daemon shares with its client distribution (client/,
  ``triggerhook_client``: the base error class, task states, the id and
  due-time rules, the time parsing rules, the back-off), which imports
  nothing of ``triggerhook`` (tests/unit/test_client_package.py).
* Only amqp/ imports the broker client (``pika``): the publisher, the command
  consumer's broker side and their one connection loop live there.
* Only api/ imports gRPC (``grpc``, ``grpc_reflection``, ``google.protobuf``)
  and the client's gRPC part (``triggerhook_client.grpc``: the generated
  messages and the metadata keys, which the server shares with
  ``GrpcClient``): the gRPC API's server lives in api/grpc/.
* client/ imports only ``triggerhook.errors``, ``triggerhook.retry`` and
  ``triggerhook.domain.task`` besides itself, and only cli imports client/.
* No import cycle between packages (or top-level modules).

Every module must be placed: a new package or top-level module fails the test
until it is added to ``LAYERS``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import triggerhook

ROOT = "triggerhook"

LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(units.split())
    for units in (
        "errors retry",
        "runtime domain",
        "interfaces settings clock logs ratelimit sdnotify status tomlfile",
        "engine store amqp metrics client local",
        "app outbox webhook",
        "api processes",
        "service",
        "wiring",
        "cli triggerhook",
        "__main__",
    )
)
LAYER_OF = {unit: index for index, units in enumerate(LAYERS) for unit in units}

STDLIB_ONLY_BELOW = 3  # layers 0-2: standard library only (and PURE_LIBRARIES)

CLIENT = "client"
CLIENT_MAY_IMPORT = frozenset(
    {"triggerhook.errors", "triggerhook.retry", "triggerhook.domain.task"}
)
CLIENT_USERS = frozenset({"cli"})

BROKER_CLIENT = "pika"
BROKER_CLIENT_USERS = frozenset({"amqp"})
GRPC_MODULES = ("grpc", "grpc_reflection", "google.protobuf", "triggerhook_client.grpc")
GRPC_USERS = frozenset({"api"})
# Third-party libraries of pure computation that the lowest layers may use:
# cronsim evaluates a series' cron expression (domain/recurrence.py); msgspec
# makes Task a Struct (domain/task.py: one is made per row armed).
PURE_LIBRARIES = frozenset({"cronsim", "msgspec"})
SHARED_WITH_CLIENT = frozenset(
    {
        "triggerhook_client.errors",
        "triggerhook_client.rules",
        "triggerhook_client.timerules",
        "triggerhook_client.backoff",
    }
)


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # the importing module, e.g. triggerhook.engine.engine
    line: int
    target: str  # the imported module, e.g. triggerhook.interfaces


def unit(module: str) -> str:
    """The package or top-level module a module belongs to: ``engine`` for
    ``triggerhook.engine.armer``, ``app`` for ``triggerhook.app``, ``triggerhook``
    for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    anchor = package[: len(package) - node.level + 1]
    return ".".join([*anchor, node.module] if node.module else anchor)


def imports(
    module: str, source: str, known: frozenset[str], is_package: bool = False
) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in ``source``, wherever it is.

    ``from a import b`` imports ``a.b`` when that is a module, else ``a``.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, is_package, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if sub in known else base))
    yield from sorted(set(found))


def _internal(target: str) -> bool:
    return target == ROOT or target.startswith(ROOT + ".")


def _third_party(target: str) -> bool:
    top = target.split(".", maxsplit=1)[0]
    return (
        not _internal(target)
        and top not in sys.stdlib_module_names | PURE_LIBRARIES
        and target not in SHARED_WITH_CLIENT
    )


def _grpc(target: str) -> bool:
    return any(target == name or target.startswith(name + ".") for name in GRPC_MODULES)


def violations(sources: Mapping[str, str], packages: frozenset[str] = frozenset()) -> list[str]:
    """Every import in ``sources`` (module name -> source) that breaks a rule;
    ``packages`` names the modules that are a package's ``__init__``."""
    known = frozenset(sources) | packages
    found: list[str] = []
    for module, source in sorted(sources.items()):
        here = unit(module)
        if here not in LAYER_OF:
            found.append(f"{module}: {here} is in no layer (add it to LAYERS)")
            continue
        for line, target in imports(module, source, known, module in packages):
            where = f"{module}:{line} imports {target}"
            if not _internal(target):
                if LAYER_OF[here] < STDLIB_ONLY_BELOW and _third_party(target):
                    found.append(f"{where}: layer {LAYER_OF[here]} uses the standard library only")
                elif target.split(".")[0] == BROKER_CLIENT and here not in BROKER_CLIENT_USERS:
                    found.append(f"{where}: only amqp/ imports {BROKER_CLIENT}")
                elif _grpc(target) and here not in GRPC_USERS:
                    found.append(f"{where}: only api/ imports gRPC")
                continue
            found.extend(f"{where}: {why}" for why in _broken(here, target))
    return found


def _broken(here: str, target: str) -> Iterator[str]:
    there = unit(target)
    if there == here:
        return
    if there not in LAYER_OF:
        yield f"{there} is in no layer (add it to LAYERS)"
        return
    mine, theirs = LAYER_OF[here], LAYER_OF[there]
    if theirs > mine:
        yield f"points up ({here} is layer {mine}, {there} layer {theirs})"
    elif theirs == mine:
        yield f"{here} and {there} are both layer {mine} and must not know each other"
    if here == CLIENT and target not in CLIENT_MAY_IMPORT:
        yield f"the client imports only {', '.join(sorted(CLIENT_MAY_IMPORT))}"
    if there == CLIENT and here not in CLIENT_USERS:
        yield f"only {', '.join(sorted(CLIENT_USERS))} imports the client"


def unit_graph(
    sources: Mapping[str, str], packages: frozenset[str] = frozenset()
) -> dict[str, set[str]]:
    """Package (or top-level module) -> the packages it imports."""
    known = frozenset(sources) | packages
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        edges = graph.setdefault(unit(module), set())
        for _, target in imports(module, source, known, module in packages):
            if _internal(target) and unit(target) != unit(module):
                edges.add(unit(target))
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every cycle once: the shortest way from a node back to itself."""
    found: list[list[str]] = []
    members: set[frozenset[str]] = set()
    for start in sorted(graph):
        path = _way_back(graph, start)
        if path and frozenset(path) not in members:
            members.add(frozenset(path))
            found.append(path)
    return found


def _way_back(graph: Mapping[str, set[str]], start: str) -> list[str] | None:
    """The shortest path from ``start`` back to ``start`` (breadth-first), if any."""
    paths = [[start]]
    seen = {start}
    while paths:
        path = paths.pop(0)
        for nxt in sorted(graph.get(path[-1], set())):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                paths.append([*path, nxt])
    return None


def load_tree() -> tuple[dict[str, str], frozenset[str]]:
    """The sources of every module under triggerhook/, by module name."""
    top = Path(triggerhook.__file__).parent
    sources: dict[str, str] = {}
    packages: set[str] = set()
    for path in sorted(top.rglob("*.py")):
        parts = [ROOT, *path.relative_to(top).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
            packages.add(".".join(parts))
        sources[".".join(parts)] = path.read_text(encoding="utf-8")
    return sources, frozenset(packages)


# -- the real tree ----------------------------------------------------------------


def test_every_import_points_down() -> None:
    sources, packages = load_tree()
    assert len(sources) > 40  # the walk found the package
    assert violations(sources, packages) == []


def test_no_import_cycle_between_packages() -> None:
    sources, packages = load_tree()
    graph = unit_graph(sources, packages)
    assert {"engine", "store", "amqp", "metrics", "runtime", "client"} <= set(graph)
    assert cycles(graph) == []


def test_the_core_and_the_adapters_do_not_know_each_other() -> None:
    graph = unit_graph(*load_tree())
    siblings = {"engine", "store", "amqp", "metrics", "local"}
    for name in siblings:
        assert graph[name] & siblings == set(), name
    assert graph["runtime"] <= {"errors", "retry"}


# -- the checker catches what it should -------------------------------------------


def test_an_import_up_is_reported_wherever_it_is() -> None:
    source = """
from typing import TYPE_CHECKING
from triggerhook.errors import TransientError
if TYPE_CHECKING:
    from triggerhook.app import TriggerHook

def later():
    import triggerhook.service
    from triggerhook import wiring
"""
    sources = {"triggerhook.engine.bad": source, "triggerhook.wiring": ""}
    assert violations(sources) == [
        "triggerhook.engine.bad:5 imports triggerhook.app: points up "
        "(engine is layer 3, app layer 4)",
        "triggerhook.engine.bad:8 imports triggerhook.service: points up "
        "(engine is layer 3, service layer 6)",
        "triggerhook.engine.bad:9 imports triggerhook.wiring: points up "
        "(engine is layer 3, wiring layer 7)",
    ]


def test_siblings_of_one_layer_are_reported() -> None:
    sources = {
        "triggerhook.metrics.collector": "from triggerhook.engine.engine import EngineStats",
        "triggerhook.engine.engine": "from triggerhook.metrics.counters import Tally",
        "triggerhook.interfaces": "from triggerhook.settings import Settings",
    }
    assert violations(sources) == [
        "triggerhook.engine.engine:1 imports triggerhook.metrics.counters: "
        "engine and metrics are both layer 3 and must not know each other",
        "triggerhook.interfaces:1 imports triggerhook.settings: "
        "interfaces and settings are both layer 2 and must not know each other",
        "triggerhook.metrics.collector:1 imports triggerhook.engine.engine: "
        "metrics and engine are both layer 3 and must not know each other",
    ]


def test_grpc_outside_the_api_is_reported() -> None:
    sources = {
        "triggerhook.api.grpc.server": "import grpc\nfrom triggerhook_client.grpc import keys",
        "triggerhook.service": "import grpc",
        "triggerhook.wiring": "from triggerhook_client.grpc.keys import SERVICE",
        "triggerhook.app": "from google.protobuf.message import Message\nimport grpc_tools",
    }
    assert violations(sources) == [
        "triggerhook.app:1 imports google.protobuf.message: only api/ imports gRPC",
        "triggerhook.service:1 imports grpc: only api/ imports gRPC",
        "triggerhook.wiring:1 imports triggerhook_client.grpc.keys: only api/ imports gRPC",
    ]


def test_relative_imports_and_own_package_imports() -> None:
    sources = {
        "triggerhook.amqp.publisher": "from . import frames\nfrom ..engine import sendbuffer",
        "triggerhook.amqp.frames": "",
        "triggerhook.engine.sendbuffer": "from .worker import Worker",
    }
    packages = frozenset({"triggerhook.amqp", "triggerhook.engine"})
    assert violations(sources, packages) == [
        "triggerhook.amqp.publisher:2 imports triggerhook.engine.sendbuffer: "
        "amqp and engine are both layer 3 and must not know each other",
    ]


def test_the_ground_floor_and_the_client_keep_to_themselves() -> None:
    sources = {
        "triggerhook.runtime.worker": (
            "import pika\nimport threading\nfrom triggerhook import retry"
        ),
        "triggerhook.retry": "",
        "triggerhook.client.calls": (
            "from triggerhook.domain.task import validate_id\nfrom triggerhook.domain import heap"
        ),
        "triggerhook.domain.heap": "",
        "triggerhook.api.http": "from triggerhook.client import Client",
        "triggerhook.newthing": "",
    }
    assert violations(sources) == [
        "triggerhook.api.http:1 imports triggerhook.client: only cli imports the client",
        "triggerhook.client.calls:2 imports triggerhook.domain.heap: the client imports only "
        "triggerhook.domain.task, triggerhook.errors, triggerhook.retry",
        "triggerhook.newthing: newthing is in no layer (add it to LAYERS)",
        "triggerhook.runtime.worker:1 imports pika: layer 1 uses the standard library only",
    ]


def test_a_cycle_between_packages_is_found() -> None:
    sources = {
        "triggerhook.engine.engine": "from triggerhook.metrics.counters import Tally",
        "triggerhook.metrics.collector": "from triggerhook.engine.engine import EngineStats",
        "triggerhook.metrics.counters": "",
        "triggerhook.app": "from triggerhook.engine.engine import Engine",
    }
    assert cycles(unit_graph(sources)) == [["engine", "metrics", "engine"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}) == [
        ["a", "b", "c", "a"],
        ["d", "d"],
    ]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_only_the_amqp_package_imports_the_broker_client() -> None:
    sources = {
        "triggerhook.amqp.consumer": "import pika\nimport pika.spec",
        "triggerhook.api.commands": "import json\nfrom pika.spec import BasicProperties",
        "triggerhook.service": "def later():\n    import pika.exceptions",
    }
    assert violations(sources) == [
        "triggerhook.api.commands:2 imports pika.spec: only amqp/ imports pika",
        "triggerhook.service:2 imports pika.exceptions: only amqp/ imports pika",
    ]
