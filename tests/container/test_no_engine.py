"""Where no container engine can run, the container tier skips its tests,
saying why (tests/container/conftest.py's ``engine`` fixture, on
``scripts/image``'s exit status 3 and its reason): checked by hiding this
machine's engine from ``scripts/image`` and from a pytest run of one of the
tier's tests. ``TRIGGERHOOK_CONTAINER_ENGINE=docker`` rules podman out; the
``docker`` on PATH is a stand-in whose daemon does not answer, or there is
none. Nothing is built or started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from container.engine import IMAGE_SCRIPT, NO_ENGINE
from support.deploy import REPO

# `docker info` as the docker CLI answers without a daemon.
FAKE_DOCKER = """#!/bin/sh
echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2
exit 1
"""
NO_DAEMON = "no container engine: docker's daemon does not answer (docker info)"


def _env(path: str) -> dict[str, str]:
    return {**os.environ, "PATH": path, "TRIGGERHOOK_CONTAINER_ENGINE": "docker"}


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )


def test_without_an_engine_the_tier_skips_saying_why(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    env = _env(f"{bin_dir}:{os.environ['PATH']}")
    done = _run([str(IMAGE_SCRIPT), "engine", "--version"], env)
    assert done.returncode == NO_ENGINE, done.stdout + done.stderr
    assert done.stderr.strip() == f"image: {NO_DAEMON}"

    # The tier's tests that need the engine skip with that reason.
    test = "tests/container/test_image.py::test_help_and_version"
    ran = _run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", test], env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 skipped" in ran.stdout, ran.stdout
    assert f"no container engine can run here: image: {NO_DAEMON}" in ran.stdout, ran.stdout


def test_without_docker_installed_the_reason_says_so() -> None:
    path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "docker").exists()
    )
    done = _run([str(IMAGE_SCRIPT), "engine", "--version"], _env(path))
    assert done.returncode == NO_ENGINE, done.stdout + done.stderr
    assert "docker is not installed" in done.stderr, done.stderr
