"""Alembic, driven from code (no alembic.ini): the schema's revisions
(``versions/``), their environment (``env.py``), and :func:`migrator`, one
connection to a database on which :mod:`triggerhook.store.mysql.schema` runs
Alembic's commands and its own statements.

Revision ``000N`` is schema version N, the ``th_meta.schema_version`` the
daemon checks, which every revision keeps in step: 0001 is the baseline
(version 1; it creates nothing: a new database is created at head from
``schema.sql``), 0002 to 0006 run ``store/mysql/migrations.py``'s
``to_v2`` to ``to_v6``. A new version adds ``versions/v000N_<what>.py`` the same way and
raises ``sql.SCHEMA_VERSION``. There are no downgrades: restore a backup.

Imported by store/mysql/schema.py only when a schema is created, upgraded or
inspected (``db`` commands, ``run --init-db``): Alembic takes a fifth of a
second to import, which the daemon and the task commands need not pay.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from triggerhook.errors import SchemaError
from triggerhook.store.mysql import sql
from triggerhook.store.mysql.connection import Cursor, open_connection, target

SCRIPTS = Path(__file__).parent


def revision_of(version: int) -> str:
    """The Alembic revision of schema version ``version``."""
    return f"{version:04d}"


def _config(attributes: dict[str, Any]) -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    config.set_main_option("path_separator", "os")
    config.attributes.update(attributes)
    return config


def head() -> str:
    """The newest revision (this release's schema version)."""
    found = ScriptDirectory.from_config(_config({})).get_current_head()
    if found is None:
        raise RuntimeError(f"no Alembic revisions in {SCRIPTS}")
    return found


class Migrator:
    """One connection: Alembic's commands, and raw statements on its cursor."""

    def __init__(self, connection: Connection, shard_count: int) -> None:
        self._connection = connection
        self._attributes = {"connection": connection, "shard_count": shard_count}
        dbapi = connection.connection.dbapi_connection
        assert dbapi is not None  # an open connection has one
        self._dbapi = dbapi

    def cursor(self) -> Cursor:
        return cast(Cursor, self._dbapi.cursor())

    def commit(self) -> None:
        """Commit what Alembic (SQLAlchemy) and the raw cursor wrote: each
        command then starts outside a transaction and commits every revision
        it applies by itself."""
        self._connection.commit()
        self._dbapi.commit()

    def revision(self) -> str | None:
        """The revision in ``alembic_version`` (None: no table, or no row)."""
        found = MigrationContext.configure(self._connection).get_current_revision()
        self.commit()
        return found

    def stamp(self, revision: str) -> None:
        """Record ``revision`` as the database's, whatever was recorded (no migration runs)."""
        command.stamp(_config(self._attributes), revision, purge=True)
        self.commit()

    def upgrade(self) -> None:
        """Apply every revision after the recorded one, each committed by itself."""
        command.upgrade(_config(self._attributes), "head")
        self.commit()


@contextlib.contextmanager
def migrator(url: str, shard_count: int, *, create: bool = False) -> Iterator[Migrator]:
    """A :class:`Migrator` on the database of ``url`` (created first if missing
    and ``create``), over one connection; errors translated."""
    name = target(url).database
    server = target(url, with_database=False)
    driver = server.driver
    conn = open_connection(server)
    engine = create_engine(f"{driver.dialect}://", creator=lambda: conn, poolclass=NullPool)
    try:
        with conn.cursor() as cur:
            if create:
                cur.execute(sql.CREATE_DATABASE.format(name=name.replace("`", "``")))
        conn.select_db(name)  # error 1049 if it does not exist
        with engine.connect() as connection:
            yield Migrator(connection, shard_count)
    except DBAPIError as exc:  # a statement of Alembic's, through SQLAlchemy
        raise driver.translate(exc.orig or exc, name) from exc
    except (driver.errors.error, OSError) as exc:  # one of the migrations' own
        raise driver.translate(exc, name) from exc
    except CommandError as exc:
        raise SchemaError(f"database {name!r}: {exc}") from exc
    finally:
        engine.dispose()
        with contextlib.suppress(Exception):  # closed already by SQLAlchemy, as a rule
            conn.close()
