"""The two distributions as a user builds and installs them from a checkout,
with pip (no container engine needed):

* both build as the image builds them (build isolation: setuptools from the
  index) without a warning: the licence is an SPDX expression with its file
  (setuptools deprecated the TOML table: "By 2027-Feb-18 ... your builds will
  no longer be supported"), and the wheels carry both;
* in a fresh venv, offline: ``pip install .`` alone fails, naming the missing
  distribution (``No matching distribution found for triggerhook-client``, as
  docs/deployment.md quotes it: the client is on no index, and the docs say
  why it stays so), and installs nothing; ``pip install ./client .``, what the
  docs say to run, then installs both without a warning (the backend's output
  included), ``pip check`` finds nothing broken, ``triggerhook --version``
  runs, the daemon's metadata names the client by name only (no ``@ file://``
  path to this checkout: its wheel installs anywhere, as the Dockerfile's build
  stage installs it from a wheelhouse), and no file belongs to both.

Every build runs in a copy of the checkout (what the Dockerfile copies), never
in the repository: setuptools writes build/ and *.egg-info beside the sources,
and two builds in one tree at once (another worker's, tests/integration/
conftest.py's wheelhouse) break each other. The fresh venv installs with
``--no-index`` and none of this machine's pip settings, from a wheelhouse
built here (the dependencies at the versions of constraints.txt, from the
index or pip's cache) without the project's own two wheels, plus setuptools
and wheel for pip's build isolation. About 30 s here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.deploy import REPO

PROJECT = ("triggerhook", "triggerhook-client")
# What a checkout's build reads (the Dockerfile's COPY sources, config/ aside).
SOURCES = ("pyproject.toml", "constraints.txt", "README.md", "LICENSE", "triggerhook", "client")
# What the client's build generates from its .proto (client/setup.py), never committed.
GENERATED = (
    "triggerhook_client/grpc/triggerhook_pb2.py",
    "triggerhook_client/grpc/triggerhook_pb2.pyi",
)
MISSING = "No matching distribution found for triggerhook-client"

# Run by a fresh venv's Python: the project's distributions, their files and requirements.
DISTRIBUTIONS = """
import importlib.metadata as m, json
found = {}
for name in ("triggerhook", "triggerhook-client"):
    try:
        d = m.distribution(name)
    except m.PackageNotFoundError:
        continue
    found[name] = {
        "version": d.version,
        "requires": d.requires or [],
        "files": [str(f) for f in d.files or [] if ".dist-info/" not in str(f)],
    }
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout's sources, for the builds to write beside."""
    directory = tmp_path_factory.mktemp("checkout")
    # The generated messages too, as a clean clone has none: the build makes them.
    ignored = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.pyc", "*_pb2.py*")
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, directory / name, ignore=ignored)
        else:
            shutil.copy2(source, directory / name)
    return directory


@pytest.fixture(scope="module")
def wheels(checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Both wheels, built verbosely (pip shows the backend's output, warnings
    included, only with -v), and that output."""
    directory = tmp_path_factory.mktemp("wheels")
    pip = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-cache-dir"]
    # As a user builds (this machine's PYTHONDONTWRITEBYTECODE makes setuptools
    # warn that it compiles nothing).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    built = subprocess.run(
        [*pip, "--disable-pip-version-check", "-w", str(directory), "./client", "."],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=checkout,
    )
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    return directory, output


def _backend_lines(output: str) -> list[str]:
    """Lines that warn, but pip's own about the machine's index settings."""
    return [
        line
        for line in output.splitlines()
        if "warn" in line.lower()
        and "Location 'file://" not in line  # pip: a configured find-links/index path is missing
        and "--warn-" not in line
    ]


def test_builds_print_no_warning(wheels: tuple[Path, str]) -> None:
    _, output = wheels
    assert "SetuptoolsDeprecationWarning" not in output
    assert "is deprecated" not in output
    assert _backend_lines(output) == []
    # The output is the backend's: the check reads what would be there.
    assert "running bdist_wheel" in output


@pytest.mark.parametrize(
    ("name", "source"), [("triggerhook", "."), ("triggerhook_client", "client")]
)
def test_wheel_carries_the_spdx_licence_and_its_file(
    wheels: tuple[Path, str], name: str, source: str
) -> None:
    directory, _ = wheels
    [wheel] = directory.glob(f"{name}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        members = archive.namelist()
        [metadata] = [m for m in members if m.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
        [licence] = [m for m in members if m.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(licence).decode() == (REPO / source / "LICENSE").read_text()
    headers = [line for line in text.splitlines() if line.startswith("License")]
    assert headers == ["License-Expression: MIT", "License-File: LICENSE"], headers
    assert "MIT License" in (REPO / source / "LICENSE").read_text()


# -- pip install from the checkout, in a fresh venv ------------------------------------


def _run(argv: list[str], cwd: Path, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """As on a fresh machine: none of this machine's pip settings (its
    config files and PIP_* variables name local indexes), no venv active."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PIP_CONFIG_FILE"] = os.devnull
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _dist_name(wheel: Path) -> str:
    return re.sub(r"[-_.]+", "-", wheel.name.split("-", 1)[0]).lower()


@pytest.fixture(scope="module")
def links(checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A --find-links directory, made with this machine's pip settings (its
    index, or pip's cache): the dependencies' wheels at the versions of
    constraints.txt and the build backend's (setuptools and wheel, which
    pip's build isolation installs), not the project's own: pip must build
    those from the checkout."""
    directory = tmp_path_factory.mktemp("links")

    def pip(*args: str) -> None:
        argv = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
        done = subprocess.run(
            argv, cwd=checkout, capture_output=True, text=True, timeout=600, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr

    pip("wheel", "-q", "-c", "constraints.txt", "-w", str(directory), "./client", ".")
    pip("download", "-q", "--only-binary", ":all:", "-d", str(directory), *_build_requires())
    for wheel in directory.glob("*.whl"):
        if _dist_name(wheel) in PROJECT:
            wheel.unlink()
    names = {_dist_name(w) for w in directory.glob("*.whl")}
    assert {"setuptools", "wheel", "httpx", "pymysql"} <= names, names
    return directory


def _build_requires() -> list[str]:
    requires: list[str] = []
    for pyproject in (REPO / "pyproject.toml", REPO / "client" / "pyproject.toml"):
        requires += tomllib.loads(pyproject.read_text())["build-system"]["requires"]
    return sorted(set(requires))


def _fresh_venv(path: Path) -> Path:
    made = _run([sys.executable, "-m", "venv", str(path)], cwd=path.parent)
    assert made.returncode == 0, made.stderr
    return path


def _pip(venv: Path, links: Path, checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    offline = ["--no-index", "--find-links", str(links), "--no-cache-dir"]
    argv = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    return _run([*argv, "install", *offline, *args], cwd=checkout)


@dataclass
class Installed:
    version: str
    requires: list[str]
    files: set[str]  # relative to site-packages, the dist-info's own aside


def _distributions(venv: Path) -> dict[str, Installed]:
    """The project's distributions installed in the venv, asked of its own Python."""
    done = _run([str(venv / "bin" / "python"), "-I", "-c", DISTRIBUTIONS], cwd=venv)
    assert done.returncode == 0, done.stderr
    return {
        name: Installed(found["version"], list(found["requires"]), set(found["files"]))
        for name, found in json.loads(done.stdout).items()
    }


def _warnings(output: str) -> list[str]:
    """Lines of pip's or the backend's output that warn or deprecate."""
    return [
        line
        for line in output.splitlines()
        if re.search(r"warn|deprecat", line, re.IGNORECASE) and "--warn-" not in line
    ]


def test_pip_install_dot_alone_names_the_client_and_with_it_both_install(
    links: Path, checkout: Path, tmp_path: Path
) -> None:
    venv = _fresh_venv(tmp_path / "venv")
    alone = _pip(venv, links, checkout, ".")
    assert alone.returncode != 0, alone.stdout
    # pip's own message (no build backend can change it: docs/deployment.md):
    # the client is the one requirement not found, and the docs quote it.
    assert MISSING in alone.stderr, alone.stderr
    assert "No matching distribution found" not in alone.stderr.replace(MISSING, ""), alone.stderr
    assert MISSING in " ".join((REPO / "docs" / "deployment.md").read_text().split())
    assert _distributions(venv) == {}

    # What the docs say to run, in the same venv (-v: the backend's output too).
    done = _pip(venv, links, checkout, "-v", "-c", "constraints.txt", "./client", ".")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "running bdist_wheel" in output  # the backend's output is there to check
    assert _warnings(output) == []

    checked = _run([str(venv / "bin" / "python"), "-m", "pip", "check"], cwd=venv)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    version = _run([str(venv / "bin" / "triggerhook"), "--version"], cwd=venv)
    assert version.returncode == 0, version.stderr
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert version.stdout.strip() == f"triggerhook {project['version']}"

    found = _distributions(venv)
    daemon, client = found["triggerhook"], found["triggerhook-client"]
    assert daemon.version == client.version == project["version"]
    # The requirement by name (and no direct reference to this checkout's path).
    assert "triggerhook-client" in daemon.requires, daemon.requires
    assert not [r for r in daemon.requires if "@" in r], daemon.requires
    # Each file has one owner: the client's package is the client distribution's alone.
    assert daemon.files & client.files == set()
    assert any(f.startswith("triggerhook_client/") for f in client.files), client.files
    # The gRPC messages are the client's, generated by its build (and its .proto).
    assert set(GENERATED) | {"triggerhook_client/grpc/triggerhook.proto"} <= client.files
    assert not [f for f in daemon.files if f.startswith("triggerhook_client/")]
