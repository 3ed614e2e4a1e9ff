"""The contract suite's stores: every test there runs once per store
(``memory``: SQLite in memory, ``mysql`` on a fresh database through each
driver, and ``sqlite`` on a new file: see :mod:`support.stores`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.stores import (
    STORES,
    Backend,
    memory_backend,
    mysql_backend,
    pymysql_backend,
    sqlite_backend,
)

from triggerhook.interfaces import TaskStore


@pytest.fixture(params=STORES)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        made = memory_backend()
    elif request.param == "sqlite":
        made = sqlite_backend(request.getfixturevalue("tmp_path") / "triggerhook.db")
    elif request.param == "mysql-pymysql":
        made = pymysql_backend(request.getfixturevalue("database_url"))
    else:
        made = mysql_backend(request.getfixturevalue("database_url"))
    try:
        yield made
    finally:
        made.store.close()


@pytest.fixture
def store(backend: Backend) -> TaskStore:
    return backend.store
