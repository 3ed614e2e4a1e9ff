"""The client distribution (client/: ``triggerhook-client``, package
``triggerhook_client``) stands alone: it imports the standard library, httpx
and itself only — never the daemon (``triggerhook``) — and depends on httpx
only. The daemon takes what they share from it (the same objects, not
copies), and ``triggerhook.client`` re-exports it unchanged.

Its optional part, ``triggerhook_client.grpc`` (the gRPC API's caller, the
.proto and its generated messages), imports grpcio and protobuf besides:
the ``grpc`` extra brings them, ``import triggerhook_client`` never imports
them, and without them importing the part says what to install.

tests/integration/test_client_install.py installs it into a fresh venv.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import triggerhook_client
from triggerhook_client import backoff, rules

import triggerhook.client
import triggerhook.client.errors
from triggerhook import errors, retry
from triggerhook.domain import bounds, task

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "client" / "triggerhook_client"
ALLOWED = frozenset({"httpx", "triggerhook_client"})
# What the daemon's lowest layers import from the client: the standard library only.
STDLIB_ONLY = frozenset({"rules", "timerules", "backoff", "answer_fields"})
# triggerhook_client.grpc: grpcio and protobuf besides (not httpx: it calls no HTTP).
GRPC_ALLOWED = frozenset({"grpc", "google", "triggerhook_client"})
GRPC_EXTRA = ("grpcio", "protobuf")


def foreign_imports(source: str, allowed: frozenset[str]) -> list[str]:
    """The top-level modules ``source`` imports that are neither the standard
    library nor in ``allowed`` (relative imports count as the package's own)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in allowed:
                found.append(name)
    return found


def test_the_checker_finds_a_foreign_import() -> None:
    source = "import json\nimport httpx\nfrom triggerhook.domain.task import TaskState\n"
    assert foreign_imports(source, ALLOWED) == ["triggerhook.domain.task"]
    assert foreign_imports("def f():\n    import aiohttp\n", ALLOWED) == ["aiohttp"]


def test_the_client_imports_only_the_standard_library_httpx_and_itself() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert {p.stem for p in modules} >= {"__init__", "calls", "errors", "sync", "aio"}
    for path in modules:
        allowed = frozenset({"triggerhook_client"}) if path.stem in STDLIB_ONLY else ALLOWED
        assert foreign_imports(path.read_text(encoding="utf-8"), allowed) == [], path.name
    assert (PACKAGE / "py.typed").is_file()


def test_the_grpc_part_imports_only_grpc_protobuf_and_the_client() -> None:
    # The generated module (gitignored) aside: protoc's, importing protobuf only.
    modules = sorted(p for p in (PACKAGE / "grpc").glob("*.py") if not p.stem.endswith("_pb2"))
    assert {p.stem for p in modules} == {"__init__", "client", "keys"}
    for path in modules:
        assert foreign_imports(path.read_text(encoding="utf-8"), GRPC_ALLOWED) == [], path.name
    assert (PACKAGE / "grpc" / "triggerhook.proto").is_file()


def test_the_grpc_extra_is_the_daemons_grpcio_and_protobuf() -> None:
    client = tomllib.loads((REPO / "client" / "pyproject.toml").read_text())["project"]
    daemon = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extra = client["optional-dependencies"]["grpc"]
    assert [r.split(">=")[0] for r in extra] == list(GRPC_EXTRA)
    # The daemon serves gRPC: it needs them itself, at the same versions.
    assert set(extra) <= set(daemon["dependencies"])


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_importing_the_client_imports_no_grpc() -> None:
    code = (
        "import sys, triggerhook_client\n"
        "from triggerhook_client import Client, AsyncClient\n"
        "print(sorted(m for m in ('grpc', 'google.protobuf') if m in sys.modules))"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("missing", ["grpc", "google.protobuf"])
def test_the_grpc_part_without_the_extra_says_what_to_install(missing: str) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{missing!r}] = None  # as if not installed\n"
        "try:\n"
        "    import triggerhook_client.grpc\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert "pip install 'triggerhook-client[grpc]'" in done.stdout, done.stdout
    assert missing in done.stdout, done.stdout


def test_the_client_distribution_depends_on_httpx_only() -> None:
    client = tomllib.loads((REPO / "client" / "pyproject.toml").read_text())["project"]
    daemon = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert client["name"] == "triggerhook-client"
    assert client["dependencies"] == ["httpx>=0.27"]
    assert "triggerhook-client" in daemon["dependencies"]
    assert not any(d.startswith("aiohttp") for d in client["dependencies"])
    # Pinned at its own version: the image's venv holds pinned distributions only.
    pins = (REPO / "constraints.txt").read_text().splitlines()
    assert f"triggerhook-client=={client['version']}" in pins


def test_the_daemon_shares_the_clients_objects() -> None:
    assert errors.TriggerHookError is triggerhook_client.TriggerHookError
    assert issubclass(triggerhook_client.ApiError, errors.TriggerHookError)
    assert task.TaskState is rules.TaskState is triggerhook_client.TaskState
    assert task.ID_PATTERN is rules.ID_PATTERN
    assert (bounds.MIN_DUE_MS, bounds.MAX_DUE_MS) == (rules.MIN_DUE_MS, rules.MAX_DUE_MS)
    assert retry.Backoff is backoff.Backoff
    assert retry.capped_exponential is backoff.capped_exponential
    # The daemon's checks and the client's speak alike.
    with pytest.raises(errors.ValidationError, match=r"1-64 characters") as caught:
        task.validate_id("a b")
    assert caught.value.message == rules.ID_RULE


def test_triggerhook_client_is_a_deprecated_re_export() -> None:
    assert "Deprecated" in (triggerhook.client.__doc__ or "")
    assert triggerhook.client.__all__
    for name in triggerhook.client.__all__:
        assert getattr(triggerhook.client, name) is getattr(triggerhook_client, name), name
    assert set(triggerhook.client.__all__) <= set(triggerhook_client.__all__)
    for name in triggerhook.client.errors.__all__:
        assert getattr(triggerhook.client.errors, name) is getattr(triggerhook_client, name)
