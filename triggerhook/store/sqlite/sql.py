"""Every SQL statement the SQLite store (``store/sqlite/store.py``) runs, in one
reviewable place: its schema, its pragmas, the protocol's statements and
the pieces of a listing (``store/sqlite/listing.py`` joins them).

All values are bound parameters (``?``). The only text ever spliced in is
built here from constants: a placeholder list ``?, ?, ...`` of a computed
length (:func:`placeholders`), and a listing's source, WHERE terms (each a
constant below, joined by AND) and ordering columns.

The tables are MySQL's (``schema.sql``), in SQLite's types, with the same
names, columns and indexes, so that the statements read like ``store/mysql/sql.py``'s
and the rules of ``docs/design/ownership.md`` apply unchanged. What differs:

* "now" is not computed in SQL: the store binds its clock's reading (the
  host's, for an embedded database), in whole milliseconds;
* no locking reads: SQLite has one writer, and every write transaction starts
  with ``BEGIN IMMEDIATE`` (the write lock), so a transaction sees no other
  write between its reads and its writes;
* marks are compared as row values, ``(fire_ms, id) <= (armed_ms, armed_id)``,
  which SQLite evaluates as ranges of the ``(…, fire_ms, id)`` indexes;
* text compares with SQLite's BINARY collation (byte order), as MySQL's
  ``ascii_bin``: ids are case-sensitive and sort as ``domain/arming.py`` says.
"""

from __future__ import annotations

# This file format's own version (it has no migrations: a file of another
# version is refused). Not MySQL's th_meta.schema_version (store/mysql/sql.py).
SCHEMA_VERSION = 1

# -- connection setup ----------------------------------------------------------------------

# Foreign keys are off by default in SQLite, per connection: th_task_tags'
# rows go with their task (ON DELETE CASCADE) only with this.
FOREIGN_KEYS_ON = "PRAGMA foreign_keys = ON"
# A file: readers do not block the writer, nor the writer readers. FULL sync:
# a call that returned has its commit on disk, power cut or not (the product's
# promise, kept in development too; the cost is one fsync per commit).
JOURNAL_WAL = "PRAGMA journal_mode = WAL"
SYNC_FULL = "PRAGMA synchronous = FULL"

BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
COMMIT = "COMMIT"

# -- schema ---------------------------------------------------------------------------------

TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"

SCHEMA = (
    "CREATE TABLE th_meta (name TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    # Columns as schema.sql's th_tasks (its comments say what each holds).
    "CREATE TABLE th_tasks ("
    " id TEXT NOT NULL PRIMARY KEY,"
    " shard INTEGER NOT NULL,"
    " rev INTEGER NOT NULL,"
    " gen INTEGER NOT NULL,"
    " fire_ms INTEGER NOT NULL,"
    " due_ms INTEGER NOT NULL,"
    " routing_key TEXT NULL,"
    " payload BLOB NULL,"
    " meta BLOB NULL,"
    " attempts INTEGER NOT NULL DEFAULT 0,"
    " throttled INTEGER NOT NULL DEFAULT 0)",
    # Arming: the rows above a shard's watermark, and those written since its last pass.
    "CREATE INDEX th_tasks_fire ON th_tasks (shard, fire_ms, id)",
    "CREATE INDEX th_tasks_gen ON th_tasks (shard, gen, fire_ms, id)",
    # Listing in due order (all, and per routing key).
    "CREATE INDEX th_tasks_listed ON th_tasks (due_ms, id, routing_key)",
    "CREATE INDEX th_tasks_key ON th_tasks (routing_key, due_ms, id)",
    # One row per tag of a task, in due order per tag; gone with its task.
    "CREATE TABLE th_task_tags ("
    " tag TEXT NOT NULL,"
    " due_ms INTEGER NOT NULL,"
    " id TEXT NOT NULL REFERENCES th_tasks (id) ON DELETE CASCADE,"
    " PRIMARY KEY (tag, due_ms, id)) WITHOUT ROWID",
    "CREATE INDEX th_task_tags_id ON th_task_tags (id)",
    # Defaults as schema.sql's: free, nothing armed (BOTTOM), generation 1.
    "CREATE TABLE th_shards ("
    " shard INTEGER NOT NULL PRIMARY KEY,"
    " owner TEXT NULL,"
    " epoch INTEGER NOT NULL DEFAULT 0,"
    " lease_until_ms INTEGER NOT NULL DEFAULT 0,"
    " armed_ms INTEGER NOT NULL DEFAULT -4611686018427387904,"
    " armed_id TEXT NOT NULL DEFAULT '',"
    " arm_gen INTEGER NOT NULL DEFAULT 1,"
    " took_ms INTEGER NOT NULL DEFAULT -4611686018427387904,"
    " took_id TEXT NOT NULL DEFAULT '',"
    " took_gen INTEGER NOT NULL DEFAULT 1)",
    "CREATE TABLE th_members ("
    " instance TEXT NOT NULL PRIMARY KEY,"
    " token INTEGER NOT NULL,"
    " heartbeat_until_ms INTEGER NOT NULL,"
    " host TEXT NOT NULL DEFAULT '',"
    " pid INTEGER NOT NULL DEFAULT 0)",
)

# The dedup window's records and the outbox, as schema.sql's th_fired and
# th_outbox. Made in every file at open (IF NOT EXISTS): a file an earlier
# release made gains them, nothing else changes, so the schema version stays.
ADDED_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS th_fired ("
    " id TEXT NOT NULL PRIMARY KEY,"
    " shard INTEGER NOT NULL,"
    " rev INTEGER NOT NULL,"
    " fired_ms INTEGER NOT NULL,"
    " expires_ms INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS th_fired_expiry ON th_fired (shard, expires_ms)",
    "CREATE TABLE IF NOT EXISTS th_outbox ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " id TEXT NOT NULL,"
    " rev INTEGER NOT NULL,"
    " due_ms INTEGER NOT NULL,"
    " routing_key TEXT NULL,"
    " payload BLOB NULL,"
    " meta BLOB NULL,"
    " on_conflict TEXT NOT NULL DEFAULT 'error',"
    " created_ms INTEGER NOT NULL)",
)
# Columns added since, the same way (SQLite has no ADD COLUMN IF NOT EXISTS:
# each is added when TASK_COLUMNS_NOW lacks it, which SQLite does in the
# table's definition alone, rewriting no row): th_tasks.throttled (R8p).
TASK_COLUMNS_NOW = "SELECT name FROM pragma_table_info('th_tasks')"
ADDED_TASK_COLUMNS = {
    "throttled": "ALTER TABLE th_tasks ADD COLUMN throttled INTEGER NOT NULL DEFAULT 0",
}

SCHEMA_VERSION_KEY = "schema_version"
SHARD_COUNT_KEY = "shard_count"
READ_META = "SELECT value FROM th_meta WHERE name = ?"
WRITE_META = "INSERT INTO th_meta (name, value) VALUES (?, ?)"
ADD_SHARD = "INSERT INTO th_shards (shard) VALUES (?)"
COUNT_SHARDS = "SELECT COUNT(*) FROM th_shards"
LANE_SHARDS = "SELECT COUNT(*) FROM th_shards WHERE shard >= ?"
ADD_LANE_SHARD = "INSERT OR IGNORE INTO th_shards (shard) VALUES (?)"

# -- rows <-> tasks --------------------------------------------------------------------------

# store/rows.py's TaskRow and ShardRow, in their order (as store/mysql/sql.py's).
TASK_COLUMNS = "id, due_ms, routing_key, payload, rev, attempts, shard, fire_ms, gen, meta"
SHARD_COLUMNS = (
    "shard, owner, epoch, armed_ms, armed_id, arm_gen, took_ms, took_id, took_gen, lease_until_ms"
)
# A task's content and state: the row, its shard's marks and its R8p flag.
TASK_STATE_COLUMNS = (
    "t.id, t.due_ms, t.routing_key, t.payload, t.meta, t.fire_ms, t.gen,"
    " s.armed_ms, s.armed_id, s.arm_gen, t.throttled"
)

SELECT_TASK_STATE = (
    f"SELECT {TASK_STATE_COLUMNS} FROM th_tasks t JOIN th_shards s ON s.shard = t.shard"
    " WHERE t.id = ?"
)
SELECT_TASKS_BY_IDS = f"SELECT {TASK_COLUMNS} FROM th_tasks WHERE id IN ({{ids}})"
SELECT_IDS = "SELECT id FROM th_tasks WHERE id IN ({ids})"
# Every shard row (a few dozen): what a write transaction decides by.
SELECT_SHARDS = f"SELECT {SHARD_COLUMNS} FROM th_shards ORDER BY shard"

# -- R6: insert ---------------------------------------------------------------------------------

# store/rows.py's insert_params, in its order.
INSERT_TASK = (
    "INSERT INTO th_tasks (id, shard, rev, gen, fire_ms, due_ms, routing_key, payload, meta)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_TAG = "INSERT INTO th_task_tags (tag, due_ms, id) VALUES (?, ?, ?)"

# -- R3: arming -----------------------------------------------------------------------------------

# One shard's part of each read of a pass (store/arm_pass.py), in mark order:
# "ranged", by th_tasks_fire: above the watermark up to the horizon;
ARM_RANGED = (
    f"SELECT {TASK_COLUMNS} FROM th_tasks"
    " WHERE shard = ? AND (fire_ms, id) > (?, ?) AND fire_ms <= ? ORDER BY fire_ms, id LIMIT ?"
)
# "fresh", by th_tasks_gen: of the current generation, at or below the watermark.
ARM_FRESH = (
    f"SELECT {TASK_COLUMNS} FROM th_tasks"
    " WHERE shard = ? AND gen = ? AND (fire_ms, id) <= (?, ?) ORDER BY fire_ms, id LIMIT ?"
)
# Before the reads: is any row of these shards due by the bound at all, armed
# or not? Every row a pass could arm has fire_ms <= max(horizon, its shard's
# watermark): finding none, an idle pass costs this one statement.
ANY_DUE = "SELECT 1 FROM th_tasks WHERE shard IN ({shards}) AND fire_ms <= ? LIMIT 1"
# The settle case (domain/arming.py's ArmPlan): a taken row armed by its own gen.
ARM_SETTLE = "UPDATE th_tasks SET gen = gen - 1 WHERE id = ?"
SET_MARKS = "UPDATE th_shards SET armed_ms = ?, armed_id = ?, arm_gen = ? WHERE shard = ?"

# After an acquisition: rows armed before the epoch began, (fire_ms, id) in
# (after, took] and gen < took_gen, in mark order.
INHERITED = (
    f"SELECT {TASK_COLUMNS} FROM th_tasks WHERE shard = ? AND (fire_ms, id) > (?, ?)"
    " AND (fire_ms, id) <= (?, ?) AND gen < ? ORDER BY fire_ms, id LIMIT ?"
)

# -- R5, R5s, R6-R8: rows by id -------------------------------------------------------------------

# R5: the confirmed revision only.
DELETE_FIRED = "DELETE FROM th_tasks WHERE id = ? AND rev = ?"
DELETE_TASK = "DELETE FROM th_tasks WHERE id = ?"
# The dedup window (docs/design/flow-control.md, section 2): R6's check after
# its insert, R5d's record, the sweep (SQLite has no DELETE ... LIMIT by default).
FIRED_LIVE = "SELECT id, fired_ms FROM th_fired WHERE id IN ({ids}) AND expires_ms > ?"
RECORD_FIRED = (
    "INSERT INTO th_fired (id, shard, rev, fired_ms, expires_ms) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET shard = excluded.shard, rev = excluded.rev,"
    " fired_ms = excluded.fired_ms, expires_ms = excluded.expires_ms"
)
# R6o: the outbox. One writer at a time holds the file: no SKIP LOCKED needed.
OUTBOX_COLUMNS = "id, rev, due_ms, routing_key, payload, meta, on_conflict, created_ms"
OUTBOX_INSERT = f"INSERT INTO th_outbox ({OUTBOX_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
OUTBOX_TAKE = f"SELECT seq, {OUTBOX_COLUMNS} FROM th_outbox ORDER BY seq LIMIT ?"
OUTBOX_DELETE = "DELETE FROM th_outbox WHERE seq = ?"
OUTBOX_WAITING = (
    "SELECT (SELECT created_ms FROM th_outbox ORDER BY seq LIMIT 1),"
    " (SELECT COUNT(*) FROM (SELECT 1 FROM th_outbox LIMIT 1000000))"
)
SWEEP_FIRED = (
    "DELETE FROM th_fired WHERE id IN (SELECT id FROM th_fired"
    " WHERE shard IN ({shards}) AND expires_ms <= ? ORDER BY shard, expires_ms LIMIT ?)"
)
# Reschedule: new time, revision, the shard's current generation (unarmed);
# failed attempts start over. Every move but POSTPONE's clears throttled.
RESCHEDULE = (
    "UPDATE th_tasks SET fire_ms = ?, due_ms = ?, rev = ?, gen = ?, attempts = 0, throttled = 0"
    " WHERE id = ?"
)
# R5s: the next occurrence, as reschedule, with its occurrence number in meta.
ADVANCE = (
    "UPDATE th_tasks SET fire_ms = ?, due_ms = ?, rev = ?, gen = ?, attempts = 0, meta = ?,"
    " throttled = 0 WHERE id = ?"
)
# Tag rows follow their task's due time.
MOVE_TAGS = "UPDATE th_task_tags SET due_ms = ? WHERE id = ?"
# A cancel too late for a series' armed occurrence stops it: only meta changes.
SET_META = "UPDATE th_tasks SET meta = ? WHERE id = ?"
# R8: fire again from the retry time, new revision, unarmed, one more failed attempt.
DEFER = (
    "UPDATE th_tasks SET fire_ms = ?, rev = ?, gen = ?, attempts = attempts + 1, throttled = 0"
    " WHERE id = ?"
)
# R8p: a copy a rate limit held back waits here: DEFER's move, attempts kept,
# flagged throttled in the same write.
POSTPONE = "UPDATE th_tasks SET fire_ms = ?, rev = ?, gen = ?, throttled = 1 WHERE id = ?"

# -- R2: shard leases ---------------------------------------------------------------------------

ACQUIRABLE = (
    "SELECT shard, epoch, armed_ms, armed_id, arm_gen FROM th_shards"
    " WHERE owner IS NULL OR lease_until_ms < ?"
)
ACQUIRE = (
    "UPDATE th_shards SET owner = ?, epoch = epoch + 1, lease_until_ms = ?,"
    " took_ms = armed_ms, took_id = armed_id, took_gen = arm_gen WHERE shard = ?"
)
# SQLite counts the rows an UPDATE matched, changed or not: a renewal within
# the same millisecond still counts.
RENEW = "UPDATE th_shards SET lease_until_ms = ? WHERE shard = ? AND owner = ? AND epoch = ?"
RELEASE = (
    "UPDATE th_shards SET owner = NULL, lease_until_ms = 0"
    " WHERE shard = ? AND owner = ? AND epoch = ?"
)

# -- R1: members ----------------------------------------------------------------------------------

MEMBER = "SELECT token, host, pid, heartbeat_until_ms FROM th_members WHERE instance = ?"
REGISTER = (
    "INSERT INTO th_members (instance, token, heartbeat_until_ms, host, pid) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (instance) DO UPDATE SET token = excluded.token,"
    " heartbeat_until_ms = excluded.heartbeat_until_ms, host = excluded.host, pid = excluded.pid"
)
HEARTBEAT = "UPDATE th_members SET heartbeat_until_ms = ? WHERE instance = ? AND token = ?"
# R1's takeover: a compare-and-set on the row as read (token and heartbeat).
TAKE_OVER_NAME = (
    "UPDATE th_members SET token = ?, heartbeat_until_ms = ?, host = ?, pid = ?"
    " WHERE instance = ? AND token = ? AND heartbeat_until_ms = ?"
)
LEAVE = "DELETE FROM th_members WHERE instance = ? AND token = ?"
LIVE_MEMBERS = "SELECT COUNT(*) FROM th_members WHERE heartbeat_until_ms >= ?"

# -- lookups -------------------------------------------------------------------------------------

COUNT_TASKS = "SELECT COUNT(*) FROM th_tasks"
EARLIEST_DUE = "SELECT MIN(due_ms) FROM th_tasks"

# -- listing (store/sqlite/listing.py builds the WHERE from a TaskFilter) ------------------------

# Where a listing reads, by its filter, and the columns that order it: a
# tag's rows in due order (th_task_tags' primary key; CROSS JOIN keeps that
# table outer), one routing key's (th_tasks_key), or all of them
# (th_tasks_listed; an id prefix is checked on its entries).
FROM_TAG = "th_task_tags g CROSS JOIN th_tasks t ON t.id = g.id"
FROM_TASKS = "th_tasks t"
TAG_DUE, TAG_ID = "g.due_ms", "g.id"
TASK_DUE, TASK_ID = "t.due_ms", "t.id"
WITH_SHARDS = " CROSS JOIN th_shards s ON s.shard = t.shard"

LIST_TASKS = (
    f"SELECT {TASK_STATE_COLUMNS} FROM {{source}}{WITH_SHARDS}"
    " WHERE {where} ORDER BY {due}, {id} LIMIT ?"
)
MATCH_KEYS = "SELECT {due}, {id} FROM {source} WHERE {where} ORDER BY {due}, {id} LIMIT ?"
COUNT_WHERE = "SELECT COUNT(*) FROM {source}{shards} WHERE {where}"
# A count that stops at a cap (the LIMIT): it reads at most that many matches.
COUNT_UP_TO = "SELECT COUNT(*) FROM (SELECT 1 FROM {source}{shards} WHERE {where} LIMIT ?)"
# Per routing key and bucket (integer division: due >= start, so a floor); the
# LIMIT: one row more than a timeline may hold (domain/listing.py).
TIMELINE = (
    "SELECT t.routing_key, ({due} - ?) / ? AS bucket, COUNT(*) FROM {source}"
    " WHERE {where} GROUP BY t.routing_key, bucket LIMIT ?"
)

# The terms of a WHERE, joined by AND (ALWAYS when none).
ALWAYS = "1"
HAS_TAG = "g.tag = ?"
# The stored key: a NULL written by hand reads back as the default but is
# not matched (as MySQL's store answers).
HAS_KEY = "t.routing_key = ?"
DUE_FROM = "{due} >= ?"
DUE_BEFORE = "{due} < ?"
AFTER_KEY = "({due}, {id}) > (?, ?)"
ID_RANGE = "t.id >= ? AND t.id < ?"
# domain/arming.py's is_armed of a row t under its shard row s.
ARMED = "((t.fire_ms, t.id) <= (s.armed_ms, s.armed_id) AND t.gen < s.arm_gen)"
NOT_ARMED = f"NOT {ARMED}"


def placeholders(count: int) -> str:
    """``?, ?, ...`` for an IN list of ``count`` bound values."""
    if count < 1:
        raise ValueError("an IN list needs at least one value")
    return ", ".join(["?"] * count)
