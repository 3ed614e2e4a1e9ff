"""Schema migrations: how a database made by an older version is upgraded.

Each ``to_vN`` takes schema version ``N - 1`` to ``N``; the Alembic revision
``000N`` (``store/mysql/alembic/versions/``) runs it, and ``triggerhook db upgrade``
(:func:`triggerhook.store.mysql.schema.upgrade_schema`, also ``db init``) runs the
revisions in order. Each migration is a function of a cursor that looks at
what exists (``information_schema``) rather than assuming, and ends by writing
its version to ``th_meta.schema_version`` (the version the daemon checks): an
upgrade that was interrupted (DDL commits implicitly) resumes where it
stopped when ``db upgrade`` runs again. A new database is not made by them:
``schema.sql`` creates it at the current version.

**Upgrades are offline**: stop every instance first. Version 3 in particular
turns the claims of version 2 (per row, by instance) into shard leases and
arm marks (docs/design/ownership.md); an instance of version 2 still running
would go on claiming rows that no longer have claim columns.

- 1: the baseline (``th_tasks`` with claims per row, ``th_meta``).
- 2: failed deliveries per task (``attempts``).
- 3: shards. ``th_shards`` and ``th_members`` are created, the shard count
  stored in ``th_meta`` (the ``shard_count`` setting, unless one is stored)
  and one ``th_shards`` row made per shard. Each task row gets ``shard`` =
  ``CRC32(id) mod N`` (MySQL's CRC32 is zlib's, as
  :func:`~triggerhook.domain.arming.shard_of` computes it),
  ``fire_ms`` (the due time, or for a row waiting for the retry of an
  undelivered event its ``claim_until_ms``) and ``gen``: 0 for a row armed by
  version 2 (``firing = 1``), 1 for any other. Each shard's watermark becomes
  the greatest ``(fire_ms, id)`` of its armed rows (none: the bottom) and its
  generation 1, free, epoch 0. So the rows version 2 armed are armed (cancel
  is too late), and the first owner reads them as inherited and fires them
  (again, once); every other row is unarmed, of the shard's current
  generation, and is armed by the first pass as usual. Then the claim columns
  and their keys go, and the shard keys come.
- 4: metadata and listing. ``th_tasks.meta`` (tags, AMQP properties and
  late-fire policy, as JSON; NULL: none), ``th_task_tags`` (one row per tag,
  removed with its task by the foreign key), and the listing keys:
  ``th_tasks_listed (due_ms, id, routing_key)`` in place of
  ``th_tasks_due_ms (due_ms)``, and ``th_tasks_key (routing_key, due_ms)``.
  Every row is kept as it is (no metadata). Offline like the others: an
  instance of version 3 still running would fire new tasks without their
  metadata.
- 5: the dedup window's fired records (``th_fired``) and the outbox of tasks
  scheduled inside a caller's transaction (``th_outbox``;
  docs/design/flow-control.md sections 2 and 6). Only tables are added; no
  row changes. Offline too: an instance of version 4 would delete fired rows
  without their records.
- 6: ``th_tasks.throttled`` (1: a rate limit postponed the row, R8p; ``get``
  shows it). Every row gets 0, and none is rewritten: an ``ADD COLUMN`` of a
  last column with a constant default, which MariaDB (10.3 and later) and
  MySQL (8.0.12 and later) do instantly, in the table's metadata (no copy, no
  rebuild, whatever the table holds; tests/integration/test_upgrade_v5.py
  checks the table is not rebuilt). Offline too: an instance of version 5
  would postpone rows without the flag, and reschedule or defer a flagged
  row without clearing it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from triggerhook.domain.arming import BOTTOM, Mark
from triggerhook.errors import SchemaError
from triggerhook.store.mysql.connection import Cursor

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

_COLUMNS = (
    "SELECT COLUMN_NAME FROM information_schema.COLUMNS"
    " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s"
)
_KEYS = (
    "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS"
    " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s"
)
_SET_VERSION = "UPDATE th_meta SET value = %s WHERE name = 'schema_version'"
_SHARD_COUNT = "SELECT value FROM th_meta WHERE name = 'shard_count'"

# The v3 data step rewrites this many rows per transaction (bounded undo).
_FILL_CHUNK = 20_000


def cursor_of(bind: Connection) -> Cursor:
    """The PyMySQL cursor under Alembic's connection (``op.get_bind()``): the
    migrations speak the DBAPI, as the store does."""
    dbapi = bind.connection.dbapi_connection
    if dbapi is None:
        raise RuntimeError("Alembic's connection is closed")
    return cast(Cursor, dbapi.cursor())


def _columns(cur: Cursor, table: str) -> set[str]:
    cur.execute(_COLUMNS, (table,))
    return {str(row[0]).lower() for row in cur.fetchall()}


def _keys(cur: Cursor, table: str) -> set[str]:
    cur.execute(_KEYS, (table,))
    return {str(row[0]).lower() for row in cur.fetchall()}


def _set_version(cur: Cursor, version: int) -> None:
    cur.execute(_SET_VERSION, (str(version),))
    cur.connection.commit()


# -- 2 ------------------------------------------------------------------------------------


def to_v2(cur: Cursor) -> None:
    if "attempts" not in _columns(cur, "th_tasks"):
        cur.execute("ALTER TABLE th_tasks ADD COLUMN attempts INT NOT NULL DEFAULT 0 AFTER rev")
    _set_version(cur, 2)


# -- 3 ------------------------------------------------------------------------------------

# The tables version 3 adds, as version 3 made them (schema.sql has the current form).
_V3_TABLES = (
    """CREATE TABLE IF NOT EXISTS th_shards (
    shard          SMALLINT     NOT NULL PRIMARY KEY,
    owner          VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    epoch          BIGINT       NOT NULL DEFAULT 0,
    lease_until_ms BIGINT       NOT NULL DEFAULT 0,
    armed_ms       BIGINT       NOT NULL DEFAULT -4611686018427387904,
    armed_id       VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    arm_gen        BIGINT       NOT NULL DEFAULT 1,
    took_ms        BIGINT       NOT NULL DEFAULT -4611686018427387904,
    took_id        VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    took_gen       BIGINT       NOT NULL DEFAULT 1
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE IF NOT EXISTS th_members (
    instance           VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    token              BIGINT       NOT NULL,
    heartbeat_until_ms BIGINT       NOT NULL,
    host               VARCHAR(255) NOT NULL DEFAULT '',
    pid                INT          NOT NULL DEFAULT 0,
    started_at         TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
)
# A count stored before (an interrupted upgrade) is kept.
_STORE_SHARD_COUNT = "INSERT IGNORE INTO th_meta (name, value) VALUES ('shard_count', %s)"
_ADD_SHARD = "INSERT IGNORE INTO th_shards (shard) VALUES (%s)"

_V3_COLUMNS = {
    "shard": "ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0 AFTER id",
    "gen": "ADD COLUMN gen BIGINT NOT NULL DEFAULT 0 AFTER rev",
    "fire_ms": "ADD COLUMN fire_ms BIGINT NOT NULL DEFAULT 0 AFTER gen",
}
_V2_KEYS = ("th_tasks_due", "th_tasks_claimed_by")
_V2_COLUMNS = ("claimed_by", "claim_until_ms", "firing")
_V3_KEYS = {
    "th_tasks_fire": "ADD KEY th_tasks_fire (shard, fire_ms, id)",
    "th_tasks_gen": "ADD KEY th_tasks_gen (shard, gen, fire_ms, id)",
    "th_tasks_due_ms": "ADD KEY th_tasks_due_ms (due_ms)",
}

# A row waiting for the retry of an undelivered event (unarmed, unclaimed,
# claimable again from claim_until_ms) fires next at that time.
_FILL = (
    "UPDATE th_tasks SET shard = CRC32(id) MOD %s,"
    " fire_ms = IF(firing = 0 AND claimed_by IS NULL AND claim_until_ms > due_ms,"
    " claim_until_ms, due_ms),"
    " gen = IF(firing = 1, 0, 1)"
    " WHERE id > %s AND id <= %s"
)
_FILL_REST = (
    "UPDATE th_tasks SET shard = CRC32(id) MOD %s,"
    " fire_ms = IF(firing = 0 AND claimed_by IS NULL AND claim_until_ms > due_ms,"
    " claim_until_ms, due_ms),"
    " gen = IF(firing = 1, 0, 1)"
    " WHERE id > %s"
)
_CHUNK_END = "SELECT id FROM th_tasks WHERE id > %s ORDER BY id LIMIT 1 OFFSET %s"
_ARMED_V2 = "SELECT shard, fire_ms, id FROM th_tasks WHERE firing = 1"
_RESET_SHARD = (
    "UPDATE th_shards SET owner = NULL, epoch = 0, lease_until_ms = 0,"
    " armed_ms = %s, armed_id = %s, arm_gen = 1, took_ms = %s, took_id = %s, took_gen = 1"
    " WHERE shard = %s"
)


def to_v3(cur: Cursor, shard_count: int) -> None:
    """``shard_count``: the count of a database that has none stored yet."""
    count = _make_shards(cur, shard_count)
    columns = _columns(cur, "th_tasks")
    # The claim columns go last, in one ALTER: while "firing" is there, the
    # data step has not been confirmed and is (re)run from them.
    if "firing" in columns:
        missing = [ddl for name, ddl in _V3_COLUMNS.items() if name not in columns]
        if missing:
            cur.execute(f"ALTER TABLE th_tasks {', '.join(missing)}")
        _fill(cur, count)
        _set_marks(cur, count)
    _replace_keys(cur)
    _set_version(cur, 3)


def _make_shards(cur: Cursor, shard_count: int) -> int:
    """The shard tables, the stored count and one row per shard; returns the count."""
    for ddl in _V3_TABLES:
        cur.execute(ddl)
    cur.execute(_STORE_SHARD_COUNT, (str(shard_count),))
    cur.execute(_SHARD_COUNT)
    row = cur.fetchone()
    count = int(row[0]) if row else 0
    if count < 1:
        raise SchemaError(f"th_meta holds no valid shard_count ({row!r})")
    cur.executemany(_ADD_SHARD, [(shard,) for shard in range(count)])
    cur.connection.commit()
    return count


def _fill(cur: Cursor, shard_count: int) -> None:
    """shard, fire_ms and gen of every row, in chunks of the primary key."""
    after = ""  # below every id
    while True:
        cur.execute(_CHUNK_END, (after, _FILL_CHUNK - 1))
        end = cur.fetchone()
        if end is None:
            cur.execute(_FILL_REST, (shard_count, after))
            cur.connection.commit()
            return
        cur.execute(_FILL, (shard_count, after, end[0]))
        cur.connection.commit()
        after = str(end[0])


def _set_marks(cur: Cursor, shard_count: int) -> None:
    """Each shard: watermark at its greatest v2-armed row, generation 1, free."""
    top: dict[int, Mark] = {}
    cur.execute(_ARMED_V2)
    for shard, fire_ms, task_id in cur.fetchall():
        mark = (int(fire_ms), str(task_id))
        top[int(shard)] = max(top.get(int(shard), BOTTOM), mark)
    params = [(*top.get(shard, BOTTOM), *BOTTOM, shard) for shard in range(shard_count)]
    cur.executemany(_RESET_SHARD, params)
    cur.connection.commit()


def _replace_keys(cur: Cursor) -> None:
    columns, keys = _columns(cur, "th_tasks"), _keys(cur, "th_tasks")
    clauses = [f"DROP KEY {key}" for key in _V2_KEYS if key in keys]
    clauses += [f"DROP COLUMN {column}" for column in _V2_COLUMNS if column in columns]
    clauses += [ddl for key, ddl in _V3_KEYS.items() if key not in keys]
    if clauses:
        # schema.sql has no defaults for these: every writer sets them.
        clauses += ["ALTER COLUMN shard DROP DEFAULT", "ALTER COLUMN fire_ms DROP DEFAULT"]
        cur.execute(f"ALTER TABLE th_tasks {', '.join(clauses)}")


# -- 4 ------------------------------------------------------------------------------------

# As version 4 made it (schema.sql has the current form).
_V4_TAGS = (
    "CREATE TABLE IF NOT EXISTS th_task_tags ("
    " tag VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " due_ms BIGINT NOT NULL,"
    " id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " PRIMARY KEY (tag, due_ms, id), KEY th_task_tags_id (id),"
    " CONSTRAINT th_task_tags_task FOREIGN KEY (id) REFERENCES th_tasks (id) ON DELETE CASCADE"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
)
_V4_KEYS = {
    "th_tasks_listed": "ADD KEY th_tasks_listed (due_ms, id, routing_key)",
    "th_tasks_key": "ADD KEY th_tasks_key (routing_key, due_ms)",
}


def to_v4(cur: Cursor) -> None:
    columns, keys = _columns(cur, "th_tasks"), _keys(cur, "th_tasks")
    clauses = [] if "meta" in columns else ["ADD COLUMN meta BLOB NULL AFTER payload"]
    clauses += [ddl for key, ddl in _V4_KEYS.items() if key not in keys]
    if "th_tasks_due_ms" in keys:
        clauses.append("DROP KEY th_tasks_due_ms")
    if clauses:
        cur.execute(f"ALTER TABLE th_tasks {', '.join(clauses)}")
    cur.execute(_V4_TAGS)
    _set_version(cur, 4)


# -- 5 ------------------------------------------------------------------------------------

# As schema.sql's th_fired and th_outbox (its comments say what each column holds).
_V5_FIRED = (
    "CREATE TABLE IF NOT EXISTS th_fired ("
    " id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,"
    " shard SMALLINT NOT NULL,"
    " rev BIGINT NOT NULL,"
    " fired_ms BIGINT NOT NULL,"
    " expires_ms BIGINT NOT NULL,"
    " KEY th_fired_expiry (shard, expires_ms)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)


_V5_OUTBOX = (
    "CREATE TABLE IF NOT EXISTS th_outbox ("
    " seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " rev BIGINT NOT NULL,"
    " due_ms BIGINT NOT NULL,"
    " routing_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,"
    " payload MEDIUMBLOB NULL,"
    " meta BLOB NULL,"
    " on_conflict VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'error',"
    " created_ms BIGINT NOT NULL"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
)


# The fast insert path's flag (sql.DEDUP_FLAG): no task with a window yet.
_V5_FLAG = (
    "INSERT INTO th_meta (name, value) VALUES ('dedup_windows', '0')"
    " ON DUPLICATE KEY UPDATE name = name"
)


def to_v5(cur: Cursor) -> None:
    cur.execute(_V5_FIRED)
    cur.execute(_V5_OUTBOX)
    cur.execute(_V5_FLAG)
    _set_version(cur, 5)


# -- 6 ------------------------------------------------------------------------------------

# Last (after created_at), as schema.sql has it: instant on every supported server.
_V6_COLUMN = "ALTER TABLE th_tasks ADD COLUMN throttled TINYINT NOT NULL DEFAULT 0"


def to_v6(cur: Cursor) -> None:
    if "throttled" not in _columns(cur, "th_tasks"):
        cur.execute(_V6_COLUMN)
    _set_version(cur, 6)
