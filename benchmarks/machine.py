"""What the run ran on: hardware, operating system, service and package versions."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import pika

from benchmarks.common import admin_connection, amqp_url

_PACKAGES = ("triggerhook", "PyMySQL", "mysqlclient", "pika", "aiohttp", "uvloop", "matplotlib")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return 0.0


def machine() -> dict[str, Any]:
    return {
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
    }


def _mariadb_version() -> str:
    db = admin_connection()
    try:
        with db.cursor() as cur:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
            return str(row[0]) if row else "unknown"
    finally:
        db.close()


def buffer_pool_mib() -> int:
    """InnoDB's buffer pool: whether a million rows' indexes stay in memory."""
    db = admin_connection()
    try:
        with db.cursor() as cur:
            cur.execute("SELECT @@innodb_buffer_pool_size")
            row = cur.fetchone()
            return int(row[0]) // 1_048_576 if row else 0
    finally:
        db.close()


def _rabbitmq_version() -> str:
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url()))
    try:
        props = conn._impl.server_properties  # what the broker announced on connect
        version = props.get("version", b"unknown")
        return version.decode() if isinstance(version, bytes) else str(version)
    finally:
        conn.close()


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    found["mariadb"] = _mariadb_version()
    found["rabbitmq"] = _rabbitmq_version()
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def commit() -> str:
    """The checked-out commit, ``+dirty`` when the work tree has changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+dirty" if dirty else head
