"""The container tier's fixtures: the engine (``scripts/image engine``) and the
image it builds from the Dockerfile (``scripts/image build``), once per session.

Where no engine can run (neither podman nor a docker daemon; scripts/test
installs Debian's podman where it can, as root with apt-get), every test that
needs one is skipped, saying why; the others (packaging, apt) still run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from container.engine import NO_ENGINE, TAG, Engine, image_script
from support.daemon import report

BUILD_TIMEOUT_S = 1800.0  # a cold build: the stand-in base, Debian's packages, the wheels


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The engine scripts/image finds (podman or docker); a skip where there is none."""
    done = image_script("engine", "--version")
    if done.returncode == NO_ENGINE:
        pytest.skip(f"no container engine can run here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stdout + done.stderr
    name = "docker" if done.stdout.lower().startswith("docker") else "podman"
    return Engine(name)


@pytest.fixture(scope="session")
def built(engine: Engine) -> Iterator[subprocess.CompletedProcess[str]]:
    """``scripts/image build`` of the tier's image (its report is printed with
    ``-s`` or on a failure); the image is removed at the end of the session
    (its layers stay in the engine's cache)."""
    done = image_script("build", "--tag", TAG, timeout_s=BUILD_TIMEOUT_S)
    assert done.returncode == 0, f"scripts/image build failed:\n{done.stderr[-6000:]}"
    for line in done.stderr.splitlines():
        if line.startswith("image: "):
            report(line)
    yield done
    engine("rmi", TAG)


@pytest.fixture(scope="session")
def image(built: subprocess.CompletedProcess[str]) -> str:
    """The image's name, as ``scripts/image build`` printed it last."""
    assert built.stdout.strip().splitlines()[-1] == TAG, built.stdout
    return TAG
