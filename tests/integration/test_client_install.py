"""The client distribution (client/, ``triggerhook-client``) on its own: pip
installs it into a fresh virtualenv — no system site-packages, so the daemon
and its drivers are not there — and that venv's Python schedules, reads and
cancels tasks on a real daemon, with :class:`Client` and with :class:`AsyncClient`.
Without its ``grpc`` extra it has no gRPC (``triggerhook_client.grpc`` says
what to install); with it, in a venv of its own, ``GrpcClient`` does the same
on a daemon serving the gRPC API, still without the daemon's distribution.

pip builds the wheel from client/ and fetches httpx and its dependencies
(setuptools and grpcio-tools for the build too) from the index or its cache, at the versions of
constraints.txt, into the session's wheelhouse (the ``wheelhouse`` fixture in
tests/integration/conftest.py, shared with test_dev_mode.py); the fresh venv
installs the client from there alone, as pip resolves it: what a service that
only schedules tasks does. A few seconds here (not marked slow).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from support.daemon import closed_port
from support.http import ROUTED, Api, api_daemon

TOKEN = "install-test-" + secrets.token_hex(8)
FAR_S = 4_000_000_000  # epoch seconds in 2096: never fires during the test
# What the daemon's distribution brings and the client's must not.
DAEMON_ONLY = ("triggerhook", "pymysql", "pika", "aiohttp", "uvloop", "influxdb_client", "msgspec")
# What the grpc extra brings (and the client's part that needs it).
GRPC_ONLY = ("grpc", "google.protobuf", "triggerhook_client.grpc")

# Run by the fresh venv's Python: the calls of both clients, as JSON lines.
SCENARIO = """
import asyncio, json, sys
from triggerhook_client import AsyncClient, Client, NotFound, TaskState

url, token, prefix, far_s, routed = sys.argv[1:6]
far_s = int(far_s)


def shown(status):
    return None if status is None else {
        "id": status.id, "due_ms": status.due_ms, "routing_key": status.routing_key,
        "payload": status.payload.decode(), "state": status.state.value,
        "tags": list(status.tags), "is_state": status.state is TaskState.SCHEDULED,
    }


def report(step, value):
    print(json.dumps({"step": step, "value": value}), flush=True)


with Client(url, token=token) as hook:
    done = hook.schedule(
        prefix + "-sync", at_ms=far_s * 1000, routing_key=routed, payload="s", tags=["t:1"]
    )
    report("sync.schedule", [done.id, done.due_ms, done.created])
    report("sync.get", shown(hook.get(prefix + "-sync")))
    hook.cancel(prefix + "-sync")
    report("sync.after_cancel", shown(hook.get(prefix + "-sync")))
    try:
        hook.cancel(prefix + "-sync")
    except NotFound as exc:
        report("sync.cancel_again", [exc.status, exc.code])
    # Deprecated: a number as at (epoch seconds); warned of on stderr, at this line.
    kept = hook.schedule(prefix + "-kept", at=far_s + 1, routing_key=routed, payload="k")
    report("sync.kept", [kept.id, kept.created, kept.due_ms])


async def main():
    async with AsyncClient(url, token=token) as hook:
        at = "2096-10-02T07:06:40"  # far_s as RFC 3339 text; no offset: UTC
        done = await hook.schedule(prefix + "-async", at=at, routing_key=routed, payload="a")
        report("async.schedule", [done.id, done.due_ms, done.created])
        report("async.get", shown(await hook.get(prefix + "-async")))
        moved = await hook.reschedule(prefix + "-async", delay_ms=3_600_000)
        report("async.reschedule", moved.due_ms - done.due_ms < 0)
        await hook.cancel(prefix + "-async")
        report("async.after_cancel", shown(await hook.get(prefix + "-async")))
        report("async.count", await hook.count(prefix=prefix))


asyncio.run(main())
"""

# Run by the [grpc] venv's Python: GrpcClient's calls, as one JSON line.
GRPC_SCENARIO = """
import json, sys
from triggerhook_client import NotFound
from triggerhook_client.grpc import GrpcClient

target, token, task_id, at_ms, routed = sys.argv[1:6]
with GrpcClient(target, token) as hook:
    written = hook.create(id=task_id, at_ms=int(at_ms), routing_key=routed, payload=b"g")
    task = hook.get(task_id)
    cancelled = hook.cancel(task_id)
    try:
        hook.cancel(task_id)
        again = None
    except NotFound as exc:
        again = [exc.status, exc.code]
print(json.dumps({
    "written": [written.id, written.due_ms, written.outcome],
    "task": [task.id, task.state, task.payload.decode()],
    "cancelled": [cancelled.id, cancelled.outcome],
    "again": again,
    "daemon": "triggerhook" in sys.modules,
}))
"""

# Run by the fresh venv's Python: where the client comes from, what else imports.
IMPORTS = """
import importlib, importlib.metadata as m, json, sys
import triggerhook_client
from pathlib import Path

failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        failed.append(name)
package = Path(triggerhook_client.__file__).parent
print(json.dumps({
    "file": str(package), "typed": (package / "py.typed").is_file(),
    "requires": m.requires("triggerhook-client"), "failed": failed,
    "installed": sorted(d.metadata["Name"].lower() for d in m.distributions()),
}))
"""


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _fresh_python(venv: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by the venv's Python in isolated mode (-I: no PYTHONPATH,
    no user site, not the current directory), from the venv's directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return _run([str(venv / "bin" / "python"), "-I", "-c", code, *args], venv, env)


@pytest.fixture(scope="module")
def venv(fresh_venv: Callable[..., Path]) -> Path:
    """A fresh venv (pip only) with the client (the wheel built from client/)
    and what it requires installed by pip."""
    return fresh_venv("client", "triggerhook-client")


@pytest.fixture(scope="module")
def grpc_venv(fresh_venv: Callable[..., Path]) -> Path:
    """A fresh venv with the client and its grpc extra (grpcio, protobuf)."""
    return fresh_venv("client-grpc", "triggerhook-client[grpc]")


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(mysql_url, amqp_url, api_token=TOKEN, default_routing_key=ROUTED) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()


def test_the_fresh_venv_holds_the_client_and_httpx_only(venv: Path) -> None:
    done = _fresh_python(venv, IMPORTS, *DAEMON_ONLY, "httpx")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    # Installed into the venv (a wheel built from client/), not found in the checkout.
    assert Path(found["file"]).is_relative_to(venv), found["file"]
    assert found["typed"] is True
    # httpx alone; grpcio and protobuf only with the grpc extra.
    assert found["requires"] == [
        "httpx>=0.27",
        'grpcio>=1.66; extra == "grpc"',
        'protobuf>=7.35.1; extra == "grpc"',
    ]
    assert found["failed"] == list(DAEMON_ONLY)  # httpx imports; none of the daemon's
    assert "triggerhook-client" in found["installed"]
    assert not {"triggerhook", "aiohttp", "pika", "pymysql"} & set(found["installed"])


def test_without_the_grpc_extra_the_grpc_part_says_what_to_install(venv: Path) -> None:
    done = _fresh_python(venv, IMPORTS, *GRPC_ONLY)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["failed"] == list(GRPC_ONLY)
    code = "import triggerhook_client.grpc"
    failed = _fresh_python(venv, code)
    assert failed.returncode == 1
    assert "ImportError" in failed.stderr, failed.stderr
    assert "pip install 'triggerhook-client[grpc]'" in failed.stderr, failed.stderr


def test_with_the_grpc_extra_grpc_client_creates_gets_and_cancels(grpc_venv: Path) -> None:
    done = _fresh_python(grpc_venv, IMPORTS, *DAEMON_ONLY, *GRPC_ONLY)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["failed"] == list(DAEMON_ONLY)  # gRPC imports; still none of the daemon's
    assert {"grpcio", "protobuf"} <= set(found["installed"])
    assert not {"triggerhook", "grpcio-tools", "aiohttp", "pika"} & set(found["installed"])


def test_the_installed_grpc_client_calls_a_daemon(
    grpc_venv: Path, mysql_url: str, amqp_url: str
) -> None:
    port = closed_port()
    with api_daemon(
        mysql_url,
        amqp_url,
        api_token=TOKEN,
        default_routing_key=ROUTED,
        grpc_enabled="true",
        grpc_port=port,
    ) as api:
        target = f"127.0.0.1:{port}"
        with grpc.insecure_channel(target) as channel:  # started after the HTTP API
            grpc.channel_ready_future(channel).result(timeout=20)
        task_id = "installed-grpc-" + secrets.token_hex(4)
        at_ms = FAR_S * 1000
        done = _fresh_python(grpc_venv, GRPC_SCENARIO, target, TOKEN, task_id, str(at_ms), ROUTED)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout) == {
            "written": [task_id, at_ms, "created"],
            "task": [task_id, "scheduled", "g"],
            "cancelled": [task_id, "cancelled"],
            "again": [None, "not_found"],
            "daemon": False,
        }
        with api.client() as http:  # the daemon, asked over HTTP: gone
            assert http.get(f"/v1/tasks/{task_id}").status_code == 404
        assert api.daemon.terminate() == 0, api.daemon.tail()


def test_the_installed_client_schedules_gets_and_cancels(venv: Path, api: Api) -> None:
    prefix = "installed-" + secrets.token_hex(4)
    done = _fresh_python(venv, SCENARIO, api.url, TOKEN, prefix, str(FAR_S), ROUTED)
    assert done.returncode == 0, done.stdout + done.stderr
    steps = {line["step"]: line["value"] for line in map(json.loads, done.stdout.splitlines())}
    far_ms = FAR_S * 1000
    for kind, payload, tags in (("sync", "s", ["t:1"]), ("async", "a", [])):
        task_id = f"{prefix}-{kind}"
        assert steps[f"{kind}.schedule"] == [task_id, far_ms, True]
        assert steps[f"{kind}.get"] == {
            "id": task_id,
            "due_ms": far_ms,
            "routing_key": ROUTED,
            "payload": payload,
            "state": "scheduled",
            "tags": tags,
            "is_state": True,
        }
        assert steps[f"{kind}.after_cancel"] is None
    assert steps["sync.cancel_again"] == [404, "not_found"]
    assert steps["sync.kept"] == [f"{prefix}-kept", True, far_ms + 1000]
    assert steps["async.reschedule"] is True  # an hour from now: before 2096
    # The deprecated spelling is warned of, at the caller's line (the scenario's).
    assert "<string>:" in done.stderr and "DeprecationWarning: at as a number" in done.stderr
    assert done.stderr.count("DeprecationWarning") == 1, done.stderr
    assert steps["async.count"] == 1  # the kept task only
    # The daemon, asked directly: the kept task is stored as sent, the others are gone.
    with api.client() as http:
        kept = http.get(f"/v1/tasks/{prefix}-kept")
        assert kept.status_code == 200, kept.text
        assert kept.json()["due_ms"] == (FAR_S + 1) * 1000 and kept.json()["payload"] == "k"
        assert kept.json()["at"] == FAR_S + 1  # deprecated: epoch seconds
        for kind in ("sync", "async"):
            assert http.get(f"/v1/tasks/{prefix}-{kind}").status_code == 404
