"""The caller's side of the outbox (R6o; docs/design/flow-control.md,
section 6): one row written into ``th_outbox`` on a connection the caller
owns, inside the caller's transaction, which the caller commits or rolls
back. The engine's side (the mover) is :meth:`StoreKernel.move_outbox`.

Connections: a DBAPI connection (PyMySQL, mysqlclient's MySQLdb, sqlite3:
the statement's placeholders follow the driver's ``paramstyle``), or a
SQLAlchemy ``Connection`` or ``Session`` (its DBAPI connection is used, in
the transaction it has begun). The statement's errors are the driver's own,
as for the caller's other statements: a deadlock is the caller's to retry,
with the rest of its transaction.
"""

from __future__ import annotations

import sys
from typing import Any

from triggerhook.domain.task import OnConflict, Task
from triggerhook.errors import ValidationError
from triggerhook.store.mysql import sql as mysql_sql
from triggerhook.store.rows import meta_blob
from triggerhook.store.sqlite import sql as sqlite_sql

# DBAPI paramstyles (PEP 249) -> the statement written with their placeholder.
_STATEMENTS = {
    "format": mysql_sql.OUTBOX_INSERT,
    "pyformat": mysql_sql.OUTBOX_INSERT,
    "qmark": sqlite_sql.OUTBOX_INSERT,
}


def dbapi_of(connection: object) -> tuple[Any, str]:
    """The DBAPI connection under ``connection`` and the outbox insert in its
    placeholders; ValidationError (field ``connection``) for anything else."""
    if type(connection).__module__.startswith("sqlalchemy"):
        connection = _sqlalchemy_dbapi(connection)
    package = sys.modules.get(type(connection).__module__.split(".")[0])
    statement = _STATEMENTS.get(getattr(package, "paramstyle", ""))
    if statement is None or not callable(getattr(connection, "cursor", None)):
        raise ValidationError(
            "connection",
            f"a {type(connection).__name__} is not a DBAPI connection of PyMySQL, MySQLdb"
            " or sqlite3, nor a SQLAlchemy Connection or Session",
        )
    return connection, statement


def _sqlalchemy_dbapi(connection: Any) -> Any:
    """A Session's or a Connection's DBAPI connection (a Session begins its
    transaction's connection, as its own statements would)."""
    if hasattr(connection, "get_bind"):  # a Session
        connection = connection.connection()
    raw = getattr(connection, "connection", None)
    dbapi = getattr(raw, "dbapi_connection", None)
    if dbapi is None:
        raise ValidationError("connection", "the SQLAlchemy connection is closed")
    return dbapi


def write_outbox(
    connection: object, task: Task, rev: int, on_conflict: OnConflict, created_ms: int
) -> None:
    """``task`` (validated) into ``th_outbox`` on ``connection``, uncommitted.
    An empty routing key is stored NULL: the moving instance's default."""
    dbapi, statement = dbapi_of(connection)
    params = (
        task.id,
        rev,
        task.due_ms,
        task.routing_key or None,
        task.payload or None,
        meta_blob(task.meta),
        on_conflict.value,
        created_ms,
    )
    cursor = dbapi.cursor()
    try:
        cursor.execute(statement, params)
    finally:
        cursor.close()
