"""PyMySQL helpers for tests: turn a SQLAlchemy-style URL into a connection."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql


def connect_kwargs(url: str) -> dict[str, Any]:
    """``mysql+pymysql://user:password@host:port[/database]`` -> pymysql.connect() kwargs."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("mysql"):
        raise ValueError(f"not a mysql URL: {url!r}")
    kwargs: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "charset": "utf8mb4",
        "autocommit": True,
        "connect_timeout": 5,
    }
    database = parts.path.lstrip("/")
    if database:
        kwargs["database"] = unquote(database)
    return kwargs


def connect(url: str) -> Any:
    """A new autocommit pymysql connection (the caller closes it)."""
    return pymysql.connect(**connect_kwargs(url))
