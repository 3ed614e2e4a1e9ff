"""The client distribution (client/: ``triggerhook-client``, package
``triggerhook_client``) stands alone: it imports the standard library, httpx
and itself only — never the daemon (``triggerhook``) — and depends on httpx
only. The daemon takes what they share from it (the same objects, not
copies), and ``triggerhook.client`` re-exports it unchanged.

tests/integration/test_client_install.py installs it into a fresh venv.
"""

from __future__ import annotations

import ast
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
