"""The MySQL/MariaDB task store (implements :class:`triggerhook.interfaces.TaskStore`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from importlib import resources
from typing import Any

import pymysql

from triggerhook.domain.task import CancelResult, RescheduleResult, Task, TaskInfo, TaskState
from triggerhook.errors import ConflictError, SchemaError, StoreError
from triggerhook.interfaces import (
    Claim,
    ClaimMode,
    Deferral,
    InsertOutcome,
    Move,
    Moved,
    NewRow,
)
from triggerhook.store import sql
from triggerhook.store.connection import (
    ConnectionPool,
    Cursor,
    connect_params,
    database_name,
    is_duplicate_key,
    open_connection,
    translate,
)
from triggerhook.store.migrations import MIGRATIONS

log = logging.getLogger(__name__)

# One INSERT statement carries at most this many rows or payload bytes; escaped
# binary at most doubles, which stays under MAX_STATEMENT_BYTES.
_INSERT_CHUNK_ROWS = 2000
_INSERT_CHUNK_BYTES = 4 * 1024 * 1024
_IN_LIST_CHUNK = 2000
_RENEW_CHUNK = 500
_DUPLICATE_RETRIES = 3
_DUPLICATE_COLUMN = 1060  # ER_DUP_FIELDNAME

Row = tuple[Any, ...]


def init_schema(url: str) -> int:
    """Create the database if missing and apply ``schema.sql``; returns the version."""
    name = database_name(url)
    server = open_connection(connect_params(url, with_database=False))
    try:
        with server.cursor() as cur:
            cur.execute(sql.CREATE_DATABASE.format(name=name.replace("`", "``")))
            cur.execute(f"USE `{name.replace('`', '``')}`")
            for statement in _schema_statements():
                cur.execute(statement)
            server.commit()
            return _migrate(cur)
    except pymysql.err.MySQLError as exc:
        raise translate(exc, name) from exc
    finally:
        server.close()


def _schema_statements() -> list[str]:
    text = resources.files("triggerhook").joinpath("schema.sql").read_text("utf-8")
    blocks = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))
    return [b.strip() for b in blocks.split("\n;") if b.strip()]


def _migrate(cur: Cursor) -> int:
    """Upgrade a database made by an older version, one version at a time."""
    version = _read_version(cur)
    while version < sql.SCHEMA_VERSION:
        version += 1
        log.info("migrating the schema to version %d", version)
        for statement in MIGRATIONS[version]:
            try:
                cur.execute(statement)
            except pymysql.err.OperationalError as exc:
                if exc.args[0] != _DUPLICATE_COLUMN:  # an interrupted run added it
                    raise
        cur.connection.commit()
    return _read_version(cur)


def _read_version(cur: Cursor) -> int:
    cur.execute(sql.READ_SCHEMA_VERSION)
    row = cur.fetchone()
    return int(row[0]) if row else 0


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class MySQLStore:
    """Thread-safe: every call borrows a pooled connection for one transaction."""

    def __init__(
        self,
        url: str,
        default_routing_key: str,
        pool_size: int = 16,
        idle_transaction_timeout_s: int = 0,
    ) -> None:
        self._database = database_name(url)
        self._pool = ConnectionPool(
            connect_params(url), pool_size, idle_transaction_timeout_s=idle_transaction_timeout_s
        )
        self._autocommit_pool = ConnectionPool(connect_params(url), pool_size, autocommit=True)
        self._default_routing_key = default_routing_key

    def check_schema(self) -> None:
        """Raise :class:`SchemaError` unless the database holds the current schema version."""
        with self._pool.transaction() as cur:
            version = _read_version(cur)
        if version != sql.SCHEMA_VERSION:
            raise SchemaError(
                f"database {self._database!r} has schema version {version}, "
                f"expected {sql.SCHEMA_VERSION}: run `triggerhook db init`"
            )

    # -- rows <-> tasks -------------------------------------------------------

    def _task(self, row: Row, attempts: int = 0, rev: int = 0) -> Task:
        return Task(
            row[0], row[1], row[2] or self._default_routing_key, row[3] or b"", attempts, rev
        )

    @staticmethod
    def _insert_params(row: NewRow, instance: str, lease_until_ms: int) -> Row:
        task = row.task
        claimed = row.claim is not ClaimMode.NONE
        return (
            task.id,
            task.due_ms,
            task.routing_key,
            task.payload or None,
            instance if claimed else None,
            lease_until_ms if claimed else 0,
            1 if row.claim is ClaimMode.ARM else 0,
            row.rev,
        )

    # -- scheduling -----------------------------------------------------------

    def insert(
        self, rows: Sequence[NewRow], instance: str, lease_until_ms: int, atomic: bool
    ) -> list[InsertOutcome]:
        first, repeats = _split_repeats(rows)
        if (
            not atomic
            and not repeats
            and self._insert_one_statement(rows, instance, lease_until_ms)
        ):
            return [InsertOutcome.CREATED] * len(rows)
        outcomes: list[InsertOutcome | None] = [None] * len(rows)
        with self._pool.transaction() as cur:
            for chunk in _insert_chunks([rows[i] for i in first], first):
                self._insert_chunk(cur, rows, chunk, instance, lease_until_ms, outcomes)
            for index, earlier in repeats.items():
                outcomes[index] = _repeat_outcome(rows[index], rows[earlier], outcomes[earlier])
            if atomic:
                for index, outcome in enumerate(outcomes):
                    if outcome is InsertOutcome.CONFLICT:
                        raise ConflictError(rows[index].task.id)
        return [o or InsertOutcome.CONFLICT for o in outcomes]

    def _insert_one_statement(
        self, rows: Sequence[NewRow], instance: str, lease_until_ms: int
    ) -> bool:
        """Fast path of group commit: rows that fit one statement, none existing,
        committed by that statement alone. False: take the general path."""
        if (
            len(rows) > _INSERT_CHUNK_ROWS
            or sum(len(r.task.payload) for r in rows) > _INSERT_CHUNK_BYTES
        ):
            return False
        params = [self._insert_params(row, instance, lease_until_ms) for row in rows]
        try:
            with self._autocommit_pool.transaction() as cur:
                cur.executemany(sql.INSERT_TASKS, params)
        except StoreError as exc:
            if isinstance(exc.__cause__, pymysql.err.IntegrityError) and is_duplicate_key(
                exc.__cause__
            ):
                return False
            raise
        return True

    def _insert_chunk(
        self,
        cur: Cursor,
        rows: Sequence[NewRow],
        chunk: list[int],
        instance: str,
        lease_until_ms: int,
        outcomes: list[InsertOutcome | None],
    ) -> None:
        pending = chunk
        for _ in range(_DUPLICATE_RETRIES):
            params = [self._insert_params(rows[i], instance, lease_until_ms) for i in pending]
            try:
                cur.executemany(sql.INSERT_TASKS, params)
            except pymysql.err.IntegrityError as exc:
                if not is_duplicate_key(exc):
                    raise
            else:
                for i in pending:
                    outcomes[i] = InsertOutcome.CREATED
                return
            # Slow path: some ids exist. Compare their contents, insert the rest.
            existing = self._fetch(cur, [rows[i].task.id for i in pending])
            remaining = []
            for i in pending:
                stored = existing.get(rows[i].task.id)
                if stored is None:
                    remaining.append(i)
                else:
                    same = stored == rows[i].task
                    outcomes[i] = InsertOutcome.EXISTS if same else InsertOutcome.CONFLICT
            if not remaining:
                return
            pending = remaining
        raise StoreError("concurrent inserts of the same ids kept colliding; retry")

    def _fetch(self, cur: Cursor, ids: Sequence[str]) -> dict[str, Task]:
        found: dict[str, Task] = {}
        for part in _chunks(ids, _IN_LIST_CHUNK):
            cur.execute(sql.SELECT_TASKS_BY_IDS.format(ids=sql.placeholders(len(part))), part)
            for row in cur.fetchall():
                found[row[0]] = self._task(row)
        return found

    # -- engine ---------------------------------------------------------------

    def claim(
        self,
        instance: str,
        now_ms: int,
        horizon_ms: int,
        arm_until_ms: int,
        lease_until_ms: int,
        limit: int,
    ) -> list[Claim]:
        with self._pool.transaction() as cur:
            cur.execute(sql.SELECT_CLAIMABLE, (horizon_ms, now_ms, limit))
            found = cur.fetchall()
            if not found:
                return []
            ids = [row[0] for row in found]
            cur.execute(
                sql.CLAIM_ROWS.format(ids=sql.placeholders(len(ids))),
                [instance, lease_until_ms, arm_until_ms, *ids],
            )
        task = self._task
        return [
            Claim(task(row, row[6], row[5]), row[5], bool(row[4]) or row[1] <= arm_until_ms)
            for row in found
        ]

    def arm(self, instance: str, claims: Sequence[Claim]) -> list[Claim]:
        armed: list[Claim] = []
        with self._pool.transaction() as cur:
            for part in _chunks(claims, _IN_LIST_CHUNK):
                ids = [c.task.id for c in part]
                cur.execute(
                    sql.LOCK_ARMABLE.format(ids=sql.placeholders(len(ids))), [*ids, instance]
                )
                current = {tid: (rev, firing) for tid, rev, firing in cur.fetchall()}
                # Only a copy of the row's current revision may fire: an older
                # one is the content of a task cancelled and created again.
                ok = [c for c in part if current.get(c.task.id, (None, 0))[0] == c.rev]
                unarmed = [c.task.id for c in ok if not current[c.task.id][1]]
                if unarmed:
                    cur.execute(sql.ARM_ROWS.format(ids=sql.placeholders(len(unarmed))), unarmed)
                armed.extend(ok)
        return armed

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        deleted = 0
        with self._pool.transaction() as cur:
            for part in _chunks(fired, _IN_LIST_CHUNK):
                params = [value for pair in part for value in pair]
                deleted += cur.execute(
                    sql.DELETE_FIRED.format(pairs=sql.placeholders(len(part), width=2)), params
                )
        return deleted

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> int:
        if not deferrals:
            return 0
        with self._pool.transaction() as cur:
            cur.executemany(
                sql.DEFER_UNDELIVERED,
                [(d.not_before_ms, d.new_rev, d.task_id, d.rev, instance) for d in deferrals],
            )
            return int(cur.rowcount)

    def renew_claims(self, instance: str, ids: Sequence[str], lease_until_ms: int) -> int:
        # Small transactions: a renewal must not hold many row locks that the
        # armer is waiting for just before those tasks are due.
        renewed = 0
        for part in _chunks(ids, _RENEW_CHUNK):
            with self._pool.transaction() as cur:
                stmt = sql.RENEW_CLAIMS.format(ids=sql.placeholders(len(part)))
                renewed += cur.execute(stmt, [lease_until_ms, instance, *part])
        return int(renewed)

    def release_claims(self, instance: str, ids: Sequence[str] | None = None) -> int:
        released = 0
        with self._pool.transaction() as cur:
            if ids is None:
                released = cur.execute(sql.RELEASE_CLAIMS, (instance,))
            else:
                for part in _chunks(ids, _IN_LIST_CHUNK):
                    stmt = sql.RELEASE_SOME_CLAIMS.format(ids=sql.placeholders(len(part)))
                    released += cur.execute(stmt, [instance, *part])
        return int(released)

    # -- lookups --------------------------------------------------------------

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        if not task_ids:
            return []
        unique = list(dict.fromkeys(task_ids))
        if len(unique) <= _IN_LIST_CHUNK and self._cancel_all_unarmed(unique):
            return _first_wins(task_ids, dict.fromkeys(unique, CancelResult.CANCELLED))
        results: dict[str, CancelResult] = {}
        with self._pool.transaction() as cur:
            for part in _chunks(list(dict.fromkeys(task_ids)), _IN_LIST_CHUNK):
                stmt = sql.LOCK_FOR_CANCEL.format(ids=sql.placeholders(len(part)))
                cur.execute(stmt, part)
                firing = dict(cur.fetchall())
                unarmed = [tid for tid in part if tid in firing and not firing[tid]]
                if unarmed:
                    cur.execute(sql.CANCEL.format(ids=sql.placeholders(len(unarmed))), unarmed)
                for tid in part:
                    results[tid] = _cancel_result(firing.get(tid))
        return _first_wins(task_ids, results)

    def reschedule(self, moves: Sequence[Move], instance: str, lease_until_ms: int) -> list[Moved]:
        last = {move.task_id: move for move in moves}  # an id moved twice: the last move
        moved: dict[str, Moved] = {}
        with self._pool.transaction() as cur:
            for part in _chunks(list(last), _IN_LIST_CHUNK):
                cur.execute(sql.LOCK_FOR_RESCHEDULE.format(ids=sql.placeholders(len(part))), part)
                found = {row[0]: row for row in cur.fetchall()}
                params = []
                for tid in part:
                    row = found.get(tid)
                    if row is None:
                        moved[tid] = Moved(RescheduleResult.NOT_FOUND)
                    elif row[4]:
                        moved[tid] = Moved(RescheduleResult.TOO_LATE)
                    else:
                        move = last[tid]
                        task = self._task((tid, move.due_ms, row[2], row[3]))
                        moved[tid] = Moved(RescheduleResult.RESCHEDULED, task)
                        params.append(_move_params(move, instance, lease_until_ms))
                if params:
                    cur.executemany(sql.RESCHEDULE, params)
        return [moved[move.task_id] for move in moves]

    def _cancel_all_unarmed(self, ids: Sequence[str]) -> bool:
        """The usual case in one statement: every id exists and is not armed.
        Commits only when the DELETE took every id; otherwise rolls back (the
        caller then locks and classifies each id). The DELETE locks the rows
        as LOCK_FOR_CANCEL does, so it excludes an arm in progress the same way."""
        try:
            with self._pool.transaction() as cur:
                deleted = cur.execute(sql.CANCEL.format(ids=sql.placeholders(len(ids))), ids)
                if deleted != len(ids):
                    raise _NotEvery
        except _NotEvery:
            return False
        return True

    def get(self, task_id: str) -> TaskInfo | None:
        with self._pool.transaction() as cur:
            cur.execute(sql.SELECT_TASK, (task_id,))
            row = cur.fetchone()
        if row is None:
            return None
        return TaskInfo(self._task(row), TaskState.FIRING if row[4] else TaskState.SCHEDULED)

    def count_tasks(self) -> int:
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.COUNT_TASKS)
            row = cur.fetchone()
        return int(row[0]) if row else 0

    def earliest_due_ms(self) -> int | None:
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.EARLIEST_DUE)
            row = cur.fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def database_time_us(self) -> int:
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.DATABASE_TIME_US)
            row = cur.fetchone()
        if row is None or row[0] is None:
            raise StoreError("the database did not tell its time")
        return int(row[0])

    def close(self) -> None:
        self._pool.close()
        self._autocommit_pool.close()


class _NotEvery(Exception):
    """Rolls back a fast-path cancel that did not find every id unarmed."""


def _move_params(move: Move, instance: str, lease_until_ms: int) -> Row:
    claimed = move.claim is not ClaimMode.NONE
    return (
        move.due_ms,
        move.rev,
        instance if claimed else None,
        lease_until_ms if claimed else 0,
        1 if move.claim is ClaimMode.ARM else 0,
        move.task_id,
    )


def _cancel_result(firing: int | None) -> CancelResult:
    if firing is None:
        return CancelResult.NOT_FOUND
    return CancelResult.TOO_LATE if firing else CancelResult.CANCELLED


def _first_wins(task_ids: Sequence[str], results: dict[str, CancelResult]) -> list[CancelResult]:
    """One result per id asked; an id asked twice is cancelled once, then not found."""
    out = []
    seen: set[str] = set()
    for tid in task_ids:
        result = results[tid]
        if tid in seen and result is CancelResult.CANCELLED:
            result = CancelResult.NOT_FOUND
        seen.add(tid)
        out.append(result)
    return out


def _split_repeats(rows: Sequence[NewRow]) -> tuple[list[int], dict[int, int]]:
    """Indexes of each id's first row, and each repeat's index -> its first row's."""
    seen: dict[str, int] = {}
    first: list[int] = []
    repeats: dict[int, int] = {}
    for index, row in enumerate(rows):
        earlier = seen.setdefault(row.task.id, index)
        if earlier == index:
            first.append(index)
        else:
            repeats[index] = earlier
    return first, repeats


def _repeat_outcome(
    row: NewRow, earlier: NewRow, earlier_outcome: InsertOutcome | None
) -> InsertOutcome:
    """A repeated id in one batch: a retry of its first row, or a conflict."""
    if row.task != earlier.task or earlier_outcome is InsertOutcome.CONFLICT:
        return InsertOutcome.CONFLICT
    return InsertOutcome.EXISTS


def _insert_chunks(rows: Sequence[NewRow], indexes: list[int]) -> Iterator[list[int]]:
    """Split row indexes into chunks bounded in rows and payload bytes."""
    chunk: list[int] = []
    size = 0
    for row, index in zip(rows, indexes, strict=True):
        if chunk and (
            len(chunk) >= _INSERT_CHUNK_ROWS or size + len(row.task.payload) > _INSERT_CHUNK_BYTES
        ):
            yield chunk
            chunk, size = [], 0
        chunk.append(index)
        size += len(row.task.payload)
    if chunk:
        yield chunk
