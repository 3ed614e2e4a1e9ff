"""The two distributions build as the image builds them (pip, build isolation:
setuptools from the index), without a warning: the licence is an SPDX
expression with its file (setuptools deprecated the TOML table: "By
2027-Feb-18 ... your builds will no longer be supported"), and the wheels
carry both. No container engine needed."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.deploy import REPO


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
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
        cwd=REPO,
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
