"""scripts/_apt.sh on a busy machine (the container tier's set-up installs
podman through it): the installs wait for dpkg's lock (apt's
DPkg::Lock::Timeout) and ``apt-get update`` for the package lists' lock,
which apt 2.6 does not wait for itself, saying what they wait for, until a
deadline. Run against a stand-in ``apt-get`` on PATH that records its calls
and holds the lists' lock for its first update: nothing is installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.deploy import REPO

# The stand-in: install fails once (stale lists), update answers as apt 2.6
# does while another process holds the lists' lock, $LOCKED_UPDATES times.
FAKE_APT_GET = """#!/bin/sh
echo "$*" >>"$CALLS"
case "$*" in
*" update")
    n=$(grep -c ' update$' "$CALLS")
    if [ "$n" -le "$LOCKED_UPDATES" ]; then
        echo "E: Could not get lock /var/lib/apt/lists/lock." \
            "It is held by process 4242 (apt-get)" >&2
        echo "E: Unable to lock directory /var/lib/apt/lists/" >&2
        exit 100
    fi ;;
*" install "*)
    [ "$(grep -c ' install ' "$CALLS")" -ge 2 ] || exit 100 ;;
esac
exit 0
"""


def _apt_install(
    tmp_path: Path, locked_updates: int, timeout_s: int
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    if os.geteuid() != 0:
        pytest.skip("apt_install runs as root only (it refuses elsewhere, saying so)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text(FAKE_APT_GET)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CALLS": str(calls),
        "LOCKED_UPDATES": str(locked_updates),
        "APT_LOCK_TIMEOUT": str(timeout_s),
        "TMPDIR": str(tmp_path),
    }
    done = subprocess.run(
        ["bash", "-c", f"source {REPO / 'scripts' / '_apt.sh'} && apt_install podman runc"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done, calls.read_text().splitlines()


def test_installs_wait_for_the_locks_and_say_so(tmp_path: Path) -> None:
    done, calls = _apt_install(tmp_path, locked_updates=1, timeout_s=600)
    assert done.returncode == 0, done.stderr
    option = "-o DPkg::Lock::Timeout=600"
    # install (fails: stale lists), update (locked), update, install.
    assert [c.split(option)[-1].split()[0] for c in calls] == [
        "install",
        "update",
        "update",
        "install",
    ]
    assert all(option in c for c in calls), calls
    assert "waits up to 600s for dpkg's lock" in done.stderr
    assert (
        "waiting up to 600s for apt's lock (Could not get lock /var/lib/apt/lists/lock. "
        "It is held by process 4242 (apt-get))" in done.stderr
    ), done.stderr


def test_the_wait_ends_at_its_deadline(tmp_path: Path) -> None:
    done, calls = _apt_install(tmp_path, locked_updates=1000, timeout_s=1)
    assert done.returncode == 1
    assert "error: could not install podman runc" in done.stderr
    assert "Could not get lock" in done.stderr
    assert 2 <= sum(c.endswith(" update") for c in calls) <= 3, calls
