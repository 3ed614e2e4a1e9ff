"""The container engine as the container tier drives it: through ``scripts/image``
(``scripts/image engine ...``: podman or docker with this machine's settings),
and the containers a test starts, always removed afterwards.

Only containers started here are ever stopped or killed, by their own names.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.deploy import REPO
from support.waiting import wait_for

IMAGE_SCRIPT = REPO / "scripts" / "image"
NO_ENGINE = 3  # scripts/image's exit status when no engine runs here
TAG = "triggerhook:test"  # the image the tier builds (never the user's triggerhook:local)


def run(
    argv: Sequence[str], timeout_s: float = 120.0, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """One command to completion, output captured; the caller checks the status."""
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        input=stdin,
        check=False,
        cwd=REPO,
    )


def image_script(*args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    return run([str(IMAGE_SCRIPT), *args], timeout_s=timeout_s)


@dataclass
class Engine:
    """``scripts/image engine``: the engine's CLI (podman's and docker's agree on
    what is used here, but the health check: see :meth:`health`)."""

    name: str  # podman or docker

    def __call__(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        return image_script("engine", *args, timeout_s=timeout_s)

    def ok(self, *args: str, timeout_s: float = 120.0) -> str:
        """The command's stdout; AssertionError with its output when it fails."""
        done = self(*args, timeout_s=timeout_s)
        assert done.returncode == 0, f"{self.name} {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def inspect(self, name: str, kind: str = "container") -> dict[str, Any]:
        found = json.loads(self.ok(kind, "inspect", name))
        assert isinstance(found, list) and len(found) == 1, found
        item = found[0]
        assert isinstance(item, dict)
        return item


def healthcheck(image: dict[str, Any]) -> dict[str, Any]:
    """The HEALTHCHECK of an image's inspect output: docker keeps it in its
    Config, podman beside it; {} when the image has none."""
    found = image["Config"].get("Healthcheck") or image.get("Healthcheck") or {}
    assert isinstance(found, dict)
    return found


@dataclass
class Container:
    """A container of the image, started detached; :meth:`remove` always runs."""

    engine: Engine
    name: str
    argv: list[str]  # the engine's run arguments, for the failure messages
    removed: bool = field(default=False)

    def state(self) -> dict[str, Any]:
        state = self.engine.inspect(self.name)["State"]
        assert isinstance(state, dict)
        return state

    def running(self) -> bool:
        return bool(self.state()["Running"])

    def logs(self) -> str:
        done = self.engine("logs", self.name)
        return done.stdout + done.stderr

    def exec(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.engine("exec", self.name, *args)

    def health(self) -> str:
        """Run the image's HEALTHCHECK now and return the container's health
        status. podman: `podman healthcheck run` (podman runs the check from
        systemd timers, and there is no systemd here); docker runs it itself."""
        if self.engine.name == "podman":
            self.engine("healthcheck", "run", self.name, timeout_s=30)
        health = self.state().get("Health") or self.state().get("Healthcheck") or {}
        return str(health.get("Status", ""))

    def wait_healthy(self, timeout_s: float) -> None:
        def healthy() -> bool:
            assert self.running(), f"the container exited\n{self.logs()}"
            return self.health() == "healthy"

        wait_for(healthy, timeout_s, lambda: f"not healthy\n{self.logs()}", interval_s=0.5)

    def stop(self, timeout_s: int) -> float:
        """`stop -t timeout_s` (the stop signal, then SIGKILL after timeout_s);
        returns how long the stop command took, in seconds."""
        started = time.monotonic()
        self.engine.ok("stop", "-t", str(timeout_s), self.name, timeout_s=timeout_s + 30)
        return time.monotonic() - started

    def kill(self) -> None:
        self.engine.ok("kill", "--signal", "KILL", self.name)

    def exit_code(self) -> int:
        state = self.state()
        assert not state["Running"], state
        return int(state["ExitCode"])

    def remove(self) -> None:
        if not self.removed:
            self.engine("rm", "--force", "--time", "0", self.name)
            self.removed = True


def container_name(prefix: str = "th-test") -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def run_detached(
    engine: Engine,
    image: str,
    args: Sequence[str],
    env: Mapping[str, str],
    options: Sequence[str] = (),
    name: str | None = None,
) -> Container:
    """``run -d`` on the host's network (the host's MariaDB and RabbitMQ on
    127.0.0.1) with ``env`` and ``options``; the caller removes it."""
    name = name or container_name()
    argv = ["run", "-d", "--name", name, "--network", "host", *options]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    argv += [image, *args]
    container = Container(engine, name, argv)
    done = engine(*argv)
    if done.returncode != 0:
        container.remove()
        raise AssertionError(f"{engine.name} {' '.join(argv)}: {done.stdout}{done.stderr}")
    return container


def write_secret(directory: Path, name: str, value: str, uid: int) -> Path:
    """A secret file as Docker or Kubernetes mounts one: readable by the
    container's user only (owned by ``uid``, mode 0400)."""
    path = directory / name
    path.write_text(value + "\n")
    path.chmod(0o400)
    os.chown(path, uid, uid)
    return path
