"""Creating, upgrading and inspecting the schema (``triggerhook db init|upgrade|status``).

The schema's versions are Alembic revisions (``store/mysql/alembic/``): revision
``000N`` is schema version N, the ``th_meta.schema_version`` that the daemon
checks and that every revision keeps in step. :func:`init_schema` creates the
database if missing; a database without a schema gets the current one from
``schema.sql`` and is stamped at head; any other is upgraded
(:func:`upgrade_schema`). Where ``alembic_version`` disagrees with
``th_meta.schema_version`` (a database made before Alembic has none; an
upgrade stopped between writing the two), the schema version wins: the
database is stamped at its revision first, then upgraded. Last, ``th_meta``
gets the shard count if it has none (a database created before keeps its own)
and ``th_shards`` exactly the rows ``0 .. N-1``.

**Upgrades are offline**: stop every instance first (``store/mysql/migrations.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from triggerhook.errors import SchemaError
from triggerhook.store.mysql import sql
from triggerhook.store.mysql.connection import (
    Cursor,
    database_name,
    is_no_such_table,
    is_unknown_database,
    open_connection,
    target,
)

if TYPE_CHECKING:
    from triggerhook.store.mysql.alembic import Migrator

log = logging.getLogger(__name__)
# Alembic's own INFO lines (plugins set up at its import, "Context impl
# MySQLImpl." at every command) are noise here: env.py logs what it applies.
logging.getLogger("alembic").setLevel(logging.WARNING)

_UPGRADE = "run `triggerhook db upgrade` with every instance stopped"
_INIT = "run `triggerhook db init`"


def init_schema(url: str, shard_count: int = 64) -> int:
    """Create the database at ``url`` if missing, and its schema when it has
    none, else upgrade it; returns its schema version. Idempotent.

    ``shard_count`` is used only by a database that has none stored yet (new,
    or made by version 2): it is fixed from then on.
    """
    if shard_count < 1:
        raise ValueError("shard_count must be at least 1")
    return _to_head(url, shard_count, create=True)


def upgrade_schema(url: str, shard_count: int = 64) -> int:
    """Upgrade the schema of the existing database at ``url`` to the current
    version; returns it. SchemaError if the database or its schema does not exist."""
    if shard_count < 1:
        raise ValueError("shard_count must be at least 1")
    return _to_head(url, shard_count, create=False)


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    """Where a database's schema stands against this release's."""

    database: str
    exists: bool
    version: int | None  # th_meta.schema_version; None: no schema
    revision: str | None  # alembic_version; None: not stamped (yet)
    head: str  # this release's revision

    @property
    def state(self) -> str:
        """``current``, ``behind`` (or no schema, or no database) or ``ahead``."""
        if self.version is None or self.version < sql.SCHEMA_VERSION:
            return "behind"
        return "current" if self.version == sql.SCHEMA_VERSION else "ahead"

    def describe(self) -> str:
        """One line: the version and revision, and what to do."""
        if not self.exists:
            return f"database {self.database!r} does not exist: {_INIT}"
        if self.version is None:
            return f"database {self.database!r} has no triggerhook schema: {_INIT}"
        recorded = f"schema version {self.version} (revision {self.revision or 'none'})"
        if self.state == "ahead":
            return (
                f"database {self.database!r}: {recorded}, newer than this release's "
                f"{sql.SCHEMA_VERSION} (revision {self.head}): use a newer triggerhook"
            )
        if self.state == "behind":
            return (
                f"database {self.database!r}: {recorded}, behind head {self.head} "
                f"(schema version {sql.SCHEMA_VERSION}): {_UPGRADE}"
            )
        record = "" if self.revision == self.head else "; `triggerhook db upgrade` records it"
        return f"database {self.database!r}: {recorded}, at head{record}"


def schema_status(url: str) -> SchemaStatus:
    """Read where the database at ``url`` stands (changes nothing)."""
    from triggerhook.store.mysql import alembic as revisions  # noqa: PLC0415  (see its docstring)

    name, head = database_name(url), revisions.head()
    if not _database_exists(url):
        return SchemaStatus(name, False, None, None, head)
    with revisions.migrator(url, 1) as db:
        version = stored_version(db.cursor())
        return SchemaStatus(name, True, version, db.revision(), head)


def read_version(cur: Cursor) -> int:
    cur.execute(sql.READ_SCHEMA_VERSION)
    row = cur.fetchone()
    return int(row[0]) if row else 0


def stored_version(cur: Cursor) -> int | None:
    """``th_meta.schema_version``; None when the database has none (no th_meta, or no row)."""
    try:
        cur.execute(sql.READ_SCHEMA_VERSION)
    except Exception as exc:  # the driver's ProgrammingError
        if is_no_such_table(exc):
            return None
        raise
    row = cur.fetchone()
    return int(row[0]) if row else None


def read_shard_count(cur: Cursor) -> int | None:
    cur.execute(sql.READ_SHARD_COUNT)
    row = cur.fetchone()
    return int(row[0]) if row else None


def _database_exists(url: str) -> bool:
    name = database_name(url)
    to = target(url, with_database=False)
    server = open_connection(to)
    try:
        server.select_db(name)
    except to.driver.errors.error as exc:
        if is_unknown_database(exc):
            return False
        raise to.driver.translate(exc, name) from exc
    finally:
        server.close()
    return True


def _to_head(url: str, shard_count: int, *, create: bool) -> int:
    from triggerhook.store.mysql import alembic as revisions  # noqa: PLC0415  (see its docstring)

    name = database_name(url)
    with revisions.migrator(url, shard_count, create=create) as db:
        cur = db.cursor()
        version = _version_or_create(cur, name, create)
        db.commit()
        _stamp(db, revisions.revision_of(version))
        if version < sql.SCHEMA_VERSION:
            log.info(
                "upgrading database %r from schema version %d to %d",
                name,
                version,
                sql.SCHEMA_VERSION,
            )
            db.upgrade()
        count = _fix_shard_count(cur, shard_count)
        _make_shard_rows(cur, count)
        db.commit()
        return read_version(cur)


def _version_or_create(cur: Cursor, name: str, create: bool) -> int:
    """The database's schema version; without a schema, ``create`` makes the current one."""
    version = stored_version(cur)
    if version is None:
        if not create:
            raise SchemaError(f"database {name!r} has no triggerhook schema: {_INIT}")
        log.info("creating the schema of database %r at version %d", name, sql.SCHEMA_VERSION)
        for statement in _schema_statements():
            cur.execute(statement)
        return sql.SCHEMA_VERSION
    if version < 1:
        raise SchemaError(f"database {name!r}: th_meta holds no valid schema_version ({version})")
    if version > sql.SCHEMA_VERSION:
        raise SchemaError(
            f"database {name!r} has schema version {version}, newer than this "
            f"release's {sql.SCHEMA_VERSION}: use a newer triggerhook"
        )
    return version


def _stamp(db: Migrator, revision: str) -> None:
    """Record ``revision`` (the schema version's) unless it is what is recorded."""
    recorded = db.revision()
    if recorded == revision:
        return
    if recorded is not None:
        log.warning(
            "alembic_version says %s, th_meta.schema_version %s: recording %s",
            recorded,
            int(revision),
            revision,
        )
    db.stamp(revision)


def _schema_statements() -> list[str]:
    text = resources.files("triggerhook").joinpath("schema.sql").read_text("utf-8")
    blocks = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))
    return [b.strip() for b in blocks.split("\n;") if b.strip()]


def _fix_shard_count(cur: Cursor, wanted: int) -> int:
    cur.execute(sql.STORE_SHARD_COUNT, (str(wanted),))
    stored = read_shard_count(cur)
    if stored is None or stored < 1:
        raise SchemaError(f"th_meta holds no valid shard_count ({stored!r})")
    if stored != wanted:
        log.warning(
            "the database keeps its shard count of %d (shard_count %d is ignored: the count "
            "is fixed when the database is created; see docs/operations.md)",
            stored,
            wanted,
        )
    return stored


def _make_shard_rows(cur: Cursor, count: int) -> None:
    cur.executemany(sql.ADD_SHARD, [(shard,) for shard in range(count)])
    cur.execute(sql.DROP_SHARDS_BEYOND, (count,))
