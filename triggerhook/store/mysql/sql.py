"""Every SQL statement triggerhook runs, in one reviewable place (the schema's
history, the migrations, lives in ``store/mysql/migrations.py``).

All values are bound parameters (``%s``). The only text ever spliced in is
built here from constants: a placeholder list ``%s, %s, ...`` (or ``(%s, %s),
...``) of a computed length (:func:`placeholders`), a ``WHEN %s THEN %s ...``
list (:func:`cases`), a UNION of one fixed SELECT repeated, and :data:`NOW_MS`.

The protocol these statements implement: ``docs/design/ownership.md`` (rules
R1-R10). Sessions run READ COMMITTED (``store/mysql/connection.py``): a plain
SELECT reads what was committed when *it* started, so a read that follows a
locking read of the shard rows sees every write that held those locks.
"""

from __future__ import annotations

# The version schema.sql creates: Alembic's head revision (store/mysql/alembic/versions).
SCHEMA_VERSION = 6

# The database's clock in epoch milliseconds, in SQL: UTC arithmetic only, so
# no session time zone (and no daylight-saving fold) is involved. Every "now"
# of the protocol is this expression, never a value computed by the client.
NOW_MS = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"

CREATE_DATABASE = "CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

READ_SCHEMA_VERSION = "SELECT value FROM th_meta WHERE name = 'schema_version'"

# -- th_meta and th_shards: fixed when the database is created --------------------------

READ_SHARD_COUNT = "SELECT value FROM th_meta WHERE name = 'shard_count'"

# A database created before keeps its count: IGNORE leaves a stored one alone.
STORE_SHARD_COUNT = "INSERT IGNORE INTO th_meta (name, value) VALUES ('shard_count', %s)"

# One row per shard, made with the column defaults (free, nothing armed);
# IGNORE keeps the rows that exist. executemany makes it one statement.
ADD_SHARD = "INSERT IGNORE INTO th_shards (shard) VALUES (%s)"
# The rate-limited lane's shard rows (N .. 2N-1: store/lanes.py).
LANE_SHARDS = "SELECT COUNT(*) FROM th_shards WHERE shard >= %s"

DROP_SHARDS_BEYOND = "DELETE FROM th_shards WHERE shard < 0 OR shard >= %s"

# -- rows <-> tasks ------------------------------------------------------------------------

# The columns a task is read with (store/mysql/store.py's TaskRow, in this order).
TASK_COLUMNS = "id, due_ms, routing_key, payload, rev, attempts, shard, fire_ms, gen, meta"

# The columns a shard row is read with (store/mysql/store.py's ShardRow, in this order).
SHARD_COLUMNS = (
    "shard, owner, epoch, armed_ms, armed_id, arm_gen, took_ms, took_id, took_gen, lease_until_ms"
)


# A task's content and state: the row, its shard's marks and its R8p flag
# (store/rows.py's info_of).
TASK_STATE_COLUMNS = (
    "t.id, t.due_ms, t.routing_key, t.payload, t.meta, t.fire_ms, t.gen,"
    " s.armed_ms, s.armed_id, s.arm_gen, t.throttled"
)

# get(): the row and its shard's marks, without locks (a snapshot of both).
SELECT_TASK_STATE = (
    f"SELECT {TASK_STATE_COLUMNS}"
    " FROM th_tasks t JOIN th_shards s ON s.shard = t.shard WHERE t.id = %s"
)

# -- R6: insert --------------------------------------------------------------------------------

# The general path (one transaction): LOCK_SHARDS_SHARED first, then the rows
# with the generations it read. Plain INSERT on purpose: a duplicate id fails
# the statement (error 1062) and the caller compares contents.
INSERT_TASKS = (
    "INSERT INTO th_tasks (id, shard, rev, gen, fire_ms, due_ms, routing_key, payload, meta)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)

# The tag rows of tasks just inserted, in the same transaction (a task with
# tags never takes the one-statement path below).
INSERT_TAGS = "INSERT INTO th_task_tags (tag, due_ms, id) VALUES (%s, %s, %s)"

# The fast path: one autocommit statement. The derived table ``s`` reads the
# batch's shard rows by a locking read in shard order (as arming takes its
# exclusive locks) and is materialized, so every shared lock is taken before
# the first row is written, and held until the statement commits: an arming
# pass of those shards waits for it, or ran entirely before it. (LIMIT keeps
# the optimizer from merging ``s`` into the join.) A shard row that is missing
# makes gen NULL, which the NOT NULL column refuses in strict mode (error
# 1048, the default sql_mode of every supported server): a row is never
# written without its shard's generation.
NEW_ROW_FIRST = (
    "SELECT %s AS id, %s AS shard, %s AS rev, %s AS fire_ms, %s AS due_ms,"
    " %s AS routing_key, %s AS payload, %s AS meta"
)
NEW_ROW_NEXT = "SELECT %s, %s, %s, %s, %s, %s, %s, %s"
# The fast path inserts without R6's check of th_fired, so it runs only while
# no task with a dedup window was ever written (docs/design/flow-control.md,
# section 2): it joins the th_meta row DEDUP_FLAG, read in share mode, and
# inserts only while it says '0'. The first insert of a task with a window
# sets it to '1' (MARK_DEDUP), never back: that write waits for every fast
# statement holding the row, so none of them can insert after a windowed
# task's record exists (the model's FAST_PATH_UNFLAGGED). From then on the
# statement inserts nothing; its caller sees 0 rows and takes the locked path.
# A database without the row (never made by schema.sql or to_v5) never takes it.
DEDUP_FLAG = "dedup_windows"
INSERT_TASKS_LOCKING = (
    "INSERT INTO th_tasks (id, shard, rev, gen, fire_ms, due_ms, routing_key, payload, meta)"
    " SELECT v.id, v.shard, v.rev, s.arm_gen, v.fire_ms, v.due_ms, v.routing_key, v.payload,"
    " v.meta"
    " FROM ({rows}) v LEFT JOIN (SELECT shard, arm_gen FROM th_shards WHERE shard IN ({shards})"
    " ORDER BY shard LIMIT 65536 LOCK IN SHARE MODE) s ON s.shard = v.shard"
    f" JOIN (SELECT value FROM th_meta WHERE name = '{DEDUP_FLAG}' LIMIT 1 LOCK IN SHARE MODE) f"
    " ON f.value = '0'"
)

# -- shard locks -----------------------------------------------------------------------------

# R6-R8: insert, cancel, reschedule and the rewrite of a returned event lock
# their shard rows in shared mode: they exclude an arming pass of the shard
# (exclusive), not each other. In shard order (the primary key's), like arming.
LOCK_SHARDS_SHARED = (
    f"SELECT {SHARD_COLUMNS} FROM th_shards WHERE shard IN ({{shards}})"
    " ORDER BY shard LOCK IN SHARE MODE"
)

# R3, step 1: the shard rows of the pass, exclusively, in shard order.
LOCK_SHARDS_FOR_ARMING = (
    f"SELECT {SHARD_COLUMNS} FROM th_shards WHERE shard IN ({{shards}}) ORDER BY shard FOR UPDATE"
)

# domain/arming.py's is_armed, in SQL, of a row t and its shard row s.
ARMED = (
    "((t.fire_ms < s.armed_ms OR (t.fire_ms = s.armed_ms AND t.id <= s.armed_id))"
    " AND t.gen < s.arm_gen)"
)

# R3a: of the rows that passes whose commit lost its answer took, those
# armed now (in the pass's transaction, under its locks on their shard rows).
ARMED_OF_IDS = (
    "SELECT "
    + ", ".join(f"t.{column}" for column in TASK_COLUMNS.split(", "))
    + " FROM th_tasks t JOIN th_shards s ON s.shard = t.shard"
    f" WHERE t.id IN ({{ids}}) AND {ARMED}"
)

# Cancel, reschedule and defer then lock the task rows they decide on.
LOCK_TASKS = f"SELECT {TASK_COLUMNS} FROM th_tasks WHERE id IN ({{ids}}) FOR UPDATE"

# -- R3: arming --------------------------------------------------------------------------------

# Step 2: the two reads of every shard of the pass in one statement
# (store/arm_pass.py), each part one index range scan in (shard, mark) order,
# at most LIMIT rows; each WHERE is an OR of per-shard terms below, spelled
# out as ranges so that the range optimizer sees index intervals. "ranged":
# the rows above each shard's watermark up to the horizon, by th_tasks_fire
# (shard, fire_ms, id). "fresh": the rows of each shard's current generation
# at or below its watermark, by th_tasks_gen (shard, gen, fire_ms, id); such
# rows above it are in the ranged read whenever a plan could take them
# (store/arm_pass.py), so they are not read twice. The indexes are forced
# because this runs every few milliseconds and must never become a filesort,
# whatever the statistics say.
ARM_READS = (
    f"(SELECT 0 AS part, {TASK_COLUMNS} FROM th_tasks FORCE INDEX (th_tasks_fire)"
    " WHERE {ranged} ORDER BY shard, fire_ms, id LIMIT %s)"
    f" UNION ALL (SELECT 1 AS part, {TASK_COLUMNS} FROM th_tasks FORCE INDEX (th_tasks_gen)"
    " WHERE {fresh} ORDER BY shard, gen, fire_ms, id LIMIT %s)"
)
ARM_RANGED_SHARD = "(shard = %s AND fire_ms > %s AND fire_ms <= %s)"
ARM_RANGED_TIE = "(shard = %s AND fire_ms = %s AND id > %s)"
ARM_FRESH_UPTO = "(shard = %s AND gen = %s AND fire_ms <= %s)"  # watermark id '~'
ARM_FRESH_BELOW = "(shard = %s AND gen = %s AND fire_ms < %s)"
ARM_FRESH_TIE = "(shard = %s AND gen = %s AND fire_ms = %s AND id <= %s)"
UNION_ALL = " UNION ALL "

# Between passes (the skip probe, store/kernel.py): would the pass's reads
# find any row? Only whether, so each part stops at its first row, and the
# fresh part is shaped for a cheap plan rather than a mark-ordered read: the
# current generation of the shards as lists of (shard, gen) pairs, one list
# per horizon the fresh read ends at (shards one pass armed share it) — every
# row the fresh read finds, and above a watermark only rows the ranged read
# holds too; ranged terms only for shards whose watermark is below the bound
# (above it the range is empty) or inside a millisecond (a tie). Over 64
# shards between full passes: a few lists and ~14 terms instead of ~190
# terms, about half of MariaDB's CPU for the statement (docs/benchmarks/levers.md).
ARM_PROBE_FRESH = "(SELECT 1 FROM th_tasks FORCE INDEX (th_tasks_gen) WHERE {fresh} LIMIT 1)"
ARM_PROBE_PAIRS = "((shard, gen) IN ({pairs}) AND fire_ms <= %s)"
ARM_PROBE_RANGED = "(SELECT 1 FROM th_tasks FORCE INDEX (th_tasks_fire) WHERE {ranged} LIMIT 1)"

# Before an idle pass's reads (the last pass armed nothing): is any row of these
# shards due by the bound at all, armed or not? Every row a pass could arm has
# fire_ms <= max(horizon, its shard's watermark), so finding none, the pass is
# skipped. One index range per shard and no marks: about a third of the reads'
# cost to MariaDB (330 against 1,160 µs of CPU over 64 shards, measured), which
# an idle instance pays every arm_interval_ms.
ANY_DUE = (
    "SELECT 1 FROM th_tasks FORCE INDEX (th_tasks_fire)"
    " WHERE shard IN ({shards}) AND fire_ms <= %s LIMIT 1"
)

# Step 3, rarely (the settle case of domain/arming.py's ArmPlan): taken rows
# of their shard's current generation are armed by their own gen. Their shard
# rows are locked by this transaction, so nothing else writes these rows.
ARM_SETTLE = "UPDATE th_tasks SET gen = gen - 1 WHERE id IN ({ids})"

# Step 3: the new marks of every shard that armed something, in one statement
# (the rows are locked by this transaction; the IN list is the same shards).
SET_MARKS = (
    "UPDATE th_shards SET armed_ms = CASE shard {armed_ms} END,"
    " armed_id = CASE shard {armed_id} END, arm_gen = CASE shard {arm_gen} END"
    " WHERE shard IN ({shards})"
)

# After an acquisition: the rows armed before the epoch began, (fire_ms, id)
# in (after, took] and gen < took_gen, in mark order, by th_tasks_fire (the
# optimizer may prefer th_tasks_gen for "gen <", which nearly every row of
# the shard matches, and then sorts them all).
INHERITED = (
    f"SELECT {TASK_COLUMNS} FROM th_tasks FORCE INDEX (th_tasks_fire)"
    " WHERE shard = %s AND (fire_ms > %s OR (fire_ms = %s AND id > %s))"
    " AND (fire_ms < %s OR (fire_ms = %s AND id <= %s)) AND gen < %s"
    " ORDER BY fire_ms, id LIMIT %s"
)

# -- R5: the delete after the broker's confirm ------------------------------------------------

# The confirmed revision only, and nothing else: whoever runs it, whenever
# (an instance paused past its lease, say), it cannot remove a newer
# incarnation of the id, which has another revision. Served by the primary key.
DELETE_FIRED = "DELETE FROM th_tasks WHERE (id, rev) IN ({pairs})"

# -- the dedup window (docs/design/flow-control.md, section 2) ------------------------------

# In the transaction that inserts a task with a window: the flag set, once.
# Set already, the row does not match and no lock stays (READ COMMITTED's
# semi-consistent read): windowed inserts do not queue on this row.
MARK_DEDUP = f"UPDATE th_meta SET value = '1' WHERE name = '{DEDUP_FLAG}' AND value = '0'"

# R6's check, after its insert and in its transaction: a locking read, so it
# reads the latest committed records (an insert of the id succeeded only once
# R5d's delete of the old row committed, and its record with it).
FIRED_LIVE = (
    "SELECT id, fired_ms FROM th_fired WHERE id IN ({ids}) AND expires_ms > %s LOCK IN SHARE MODE"
)

# R5d: the records of the rows deleted in the same transaction; a record of
# an earlier incarnation (expired, not swept yet) is overwritten.
RECORD_FIRED = (
    "INSERT INTO th_fired (id, shard, rev, fired_ms, expires_ms) VALUES (%s, %s, %s, %s, %s)"
    " ON DUPLICATE KEY UPDATE shard = VALUES(shard), rev = VALUES(rev),"
    " fired_ms = VALUES(fired_ms), expires_ms = VALUES(expires_ms)"
)

# The sweep: a batch of these shards' expired records, by th_fired_expiry.
SWEEP_FIRED = (
    "DELETE FROM th_fired WHERE shard IN ({shards}) AND expires_ms <= %s"
    " ORDER BY shard, expires_ms LIMIT %s"
)

# -- R6o: the outbox (docs/design/flow-control.md, section 6) ----------------------------------

# The columns a caller's transaction writes (schedule_in), in order.
OUTBOX_COLUMNS = "id, rev, due_ms, routing_key, payload, meta, on_conflict, created_ms"
# The caller's insert, in its own transaction: no other table is read or
# locked (a shard row held by a business transaction would stop arming).
OUTBOX_INSERT = f"INSERT INTO th_outbox ({OUTBOX_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
# The mover's first step: the oldest committed rows, locked; a row another
# mover's transaction holds is skipped, so two movers never take one row.
OUTBOX_TAKE = (
    f"SELECT seq, {OUTBOX_COLUMNS} FROM th_outbox ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED"
)
# ... and its last, in the same transaction as R6's insert of those tasks.
OUTBOX_DELETE = "DELETE FROM th_outbox WHERE seq IN ({seqs})"
# The first row waiting (the metrics' outbox lag: by the primary key, no scan)
# and how many wait, counted up to a bound; without a lock.
OUTBOX_WAITING = (
    "SELECT (SELECT created_ms FROM th_outbox ORDER BY seq LIMIT 1),"
    " (SELECT COUNT(*) FROM (SELECT 1 FROM th_outbox LIMIT 1000000) w)"
)

# -- R7: cancel, R6: reschedule, R8: returned events --------------------------------------------

# Of the locked rows, the unarmed ones (the caller checked them against the
# locked shard marks).
DELETE_TASKS = "DELETE FROM th_tasks WHERE id IN ({ids})"

# R7's usual case in one statement: delete the given rows that are not armed.
# Like INSERT_TASKS_LOCKING, the derived table ``s`` takes the shard rows'
# shared locks (in shard order, materialized) before any task row is locked,
# so an arming pass of those shards happens entirely before or after it. The
# caller commits only when every id was deleted (all existed, none armed).
CANCEL_UNARMED = (
    "DELETE t FROM th_tasks t FORCE INDEX (PRIMARY) JOIN (SELECT shard, armed_ms, armed_id, arm_gen"
    " FROM th_shards"
    " WHERE shard IN ({shards}) ORDER BY shard LIMIT 65536 LOCK IN SHARE MODE) s"
    " ON s.shard = t.shard WHERE t.id IN ({ids}) AND NOT {armed}"
)

# One row of a derived table of new values, repeated with UNION ALL; the
# first carries the column names.
MOVE_FIRST = "SELECT %s AS id, %s AS fire_ms, %s AS rev, %s AS gen"
MOVE_NEXT = "SELECT %s, %s, %s, %s"

# Reschedule: the locked unarmed rows to their new time, revision and the
# shard's current generation (unarmed, R6); failed attempts start over. Every
# move of a row but POSTPONE's clears ``throttled`` (the one write that sets it).
RESCHEDULE = (
    "UPDATE th_tasks t JOIN ({moves}) m ON m.id = t.id"
    " SET t.fire_ms = m.fire_ms, t.due_ms = m.fire_ms, t.rev = m.rev, t.gen = m.gen,"
    " t.attempts = 0, t.throttled = 0"
)

# ... and their tag rows to the new due time (same moves; only when one has tags).
RESCHEDULE_TAGS = "UPDATE th_task_tags g JOIN ({moves}) m ON m.id = g.id SET g.due_ms = m.fire_ms"

# R5s: a series' confirmed occurrence becomes its next one, in the same
# transaction (the rows and their shard rows locked, as reschedule does):
# new time, revision, the shard's current generation (unarmed) and the
# occurrence number in meta. Its tag rows follow (RESCHEDULE_TAGS, same moves).
ADVANCE_FIRST = "SELECT %s AS id, %s AS fire_ms, %s AS rev, %s AS gen, %s AS meta"
ADVANCE_NEXT = "SELECT %s, %s, %s, %s, %s"
ADVANCE = (
    "UPDATE th_tasks t JOIN ({moves}) m ON m.id = t.id"
    " SET t.fire_ms = m.fire_ms, t.due_ms = m.fire_ms, t.rev = m.rev, t.gen = m.gen,"
    " t.attempts = 0, t.meta = m.meta, t.throttled = 0"
)

# A cancel too late for a series' armed occurrence stops the series after it:
# only meta changes (the row stays armed at its revision, as the copy fired has it).
SET_META = "UPDATE th_tasks SET meta = %s WHERE id = %s"

# R8: an event the broker did not take, of a row armed in the current epoch:
# fire again from the retry time (fire_ms; the due time the event says stays),
# at a new revision, unarmed (the shard's current generation), one more
# failed attempt.
DEFER = (
    "UPDATE th_tasks t JOIN ({moves}) m ON m.id = t.id"
    " SET t.fire_ms = m.fire_ms, t.rev = m.rev, t.gen = m.gen, t.attempts = t.attempts + 1,"
    " t.throttled = 0"
)

# R8p: a copy a rate limit holds back past the arming horizon waits in the
# database: DEFER's move to its token's instant, with attempts kept (nothing
# failed: a postponed task dead-lettered for its attempts would be a lie),
# flagged ``throttled`` in the same write (get shows it while it waits).
POSTPONE = (
    "UPDATE th_tasks t JOIN ({moves}) m ON m.id = t.id"
    " SET t.fire_ms = m.fire_ms, t.rev = m.rev, t.gen = m.gen, t.throttled = 1"
)

# -- R2: shard leases ---------------------------------------------------------------------------

# Free or expired shards, skipping those another instance is acquiring now.
ACQUIRABLE = (
    "SELECT shard, epoch, armed_ms, armed_id, arm_gen FROM th_shards"
    f" WHERE owner IS NULL OR lease_until_ms < {NOW_MS} FOR UPDATE SKIP LOCKED"
)

# Of the shards locked by ACQUIRABLE: a new epoch, and the marks it began with.
ACQUIRE = (
    f"UPDATE th_shards SET owner = %s, epoch = epoch + 1, lease_until_ms = {NOW_MS} + %s,"
    " took_ms = armed_ms, took_id = armed_id, took_gen = arm_gen WHERE shard IN ({shards})"
)

# Renew and release name the leases as (shard, epoch): a shard acquired by
# anyone since (a new epoch) is not matched. The plain IN on shard gives the
# optimizer its primary-key range.
RENEW = (
    f"UPDATE th_shards SET lease_until_ms = {NOW_MS} + %s"
    " WHERE owner = %s AND shard IN ({shards}) AND (shard, epoch) IN ({pairs})"
)

OWNED = "SELECT shard, epoch FROM th_shards WHERE owner = %s AND shard IN ({shards})"

RELEASE = (
    "UPDATE th_shards SET owner = NULL, lease_until_ms = 0"
    " WHERE owner = %s AND shard IN ({shards}) AND (shard, epoch) IN ({pairs})"
)

# -- R1: members ----------------------------------------------------------------------------------

REGISTER = (
    "INSERT INTO th_members (instance, token, heartbeat_until_ms, host, pid)"
    f" VALUES (%s, %s, {NOW_MS} + %s, %s, %s)"
)

# A name whose holder's heartbeat expired. Conditional, so that of two
# processes taking it over at once exactly one matches (the other waits for
# the row lock, then finds the heartbeat renewed).
TAKE_OVER_MEMBER = (
    f"UPDATE th_members SET token = %s, heartbeat_until_ms = {NOW_MS} + %s, host = %s, pid = %s,"
    f" started_at = CURRENT_TIMESTAMP(3) WHERE instance = %s AND heartbeat_until_ms < {NOW_MS}"
)

MEMBER = "SELECT token, host, pid FROM th_members WHERE instance = %s"

# The holder of a name as it is now, and the database's time of the read (R1).
NAME_HOLDER = (
    f"SELECT token, host, pid, heartbeat_until_ms, {NOW_MS} FROM th_members WHERE instance = %s"
)

# R1's takeover of a name, live or expired: a compare-and-set on the row as
# read (its token and heartbeat), so a holder that renewed meanwhile, or a
# second process taking the name over from the same dead holder, makes it
# match nothing.
TAKE_OVER_NAME = (
    f"UPDATE th_members SET token = %s, heartbeat_until_ms = {NOW_MS} + %s, host = %s, pid = %s,"
    " started_at = CURRENT_TIMESTAMP(3)"
    " WHERE instance = %s AND token = %s AND heartbeat_until_ms = %s"
)

HEARTBEAT = (
    f"UPDATE th_members SET heartbeat_until_ms = {NOW_MS} + %s WHERE instance = %s AND token = %s"
)

LEAVE = "DELETE FROM th_members WHERE instance = %s AND token = %s"

LIVE_MEMBERS = f"SELECT COUNT(*) FROM th_members WHERE heartbeat_until_ms >= {NOW_MS}"


def placeholders(count: int, width: int = 1) -> str:
    """``%s, %s, ...`` for an IN list of ``count`` bound values; with ``width``
    2, ``(%s, %s), ...`` for a list of pairs."""
    if count < 1:
        raise ValueError("an IN list needs at least one value")
    one = "%s" if width == 1 else f"({', '.join(['%s'] * width)})"
    return ", ".join([one] * count)


def cases(count: int) -> str:
    """``WHEN %s THEN %s ...`` for a ``CASE`` of ``count`` bound pairs."""
    if count < 1:
        raise ValueError("a CASE needs at least one WHEN")
    return " ".join(["WHEN %s THEN %s"] * count)


def new_rows(count: int) -> str:
    """The derived table of INSERT_TASKS_LOCKING: ``count`` rows of 8 values."""
    if count < 1:
        raise ValueError("a derived table needs at least one row")
    return UNION_ALL.join([NEW_ROW_FIRST] + [NEW_ROW_NEXT] * (count - 1))


def advances(count: int) -> str:
    """The derived table of ADVANCE: ``count`` rows of 5 values."""
    if count < 1:
        raise ValueError("a derived table needs at least one row")
    return UNION_ALL.join([ADVANCE_FIRST] + [ADVANCE_NEXT] * (count - 1))


def moves(count: int) -> str:
    """The derived table of RESCHEDULE, DEFER and POSTPONE: ``count`` rows of 4 values."""
    if count < 1:
        raise ValueError("a derived table needs at least one row")
    return UNION_ALL.join([MOVE_FIRST] + [MOVE_NEXT] * (count - 1))


# -- listing, counting and bulk cancel (store/mysql/queries.py builds the WHERE) ----------------

# What a listing reads, by its filter: a tag's rows in due order (th_task_tags'
# primary key, then each task by its primary key), one routing key's
# (th_tasks_key), those of an id prefix (the optimizer's pick of the primary
# key's range, then a sort, or th_tasks_listed in due order), or all of them
# (th_tasks_listed). {due} and {id} are
# the ordering columns of the source: g.due_ms, g.id or t.due_ms, t.id.
FROM_TAG = "th_task_tags g JOIN th_tasks t ON t.id = g.id"
FROM_KEY = "th_tasks t FORCE INDEX (th_tasks_key)"
FROM_DUE = "th_tasks t FORCE INDEX (th_tasks_listed)"  # else a first page may sort them all
FROM_PREFIX = "th_tasks t"
WITH_SHARDS = " JOIN th_shards s FORCE INDEX (PRIMARY) ON s.shard = t.shard"
# The armed tasks (state=firing): per shard, th_tasks_fire's range up to its
# watermark (FIRE_RANGE, one per shard, OR-ed), which holds only armed rows
# and rows written since the shard's last pass: few, however large the table
# (a walk of everything in due order would read it all when nothing is armed).
# The marks come first (ARMED_SHARDS); ARMED then decides each row, against
# the marks the statement reads itself.
FROM_FIRE = "th_tasks t FORCE INDEX (th_tasks_fire)"
FROM_FIRE_TAG = f"{FROM_FIRE} JOIN th_task_tags g FORCE INDEX (th_task_tags_id) ON g.id = t.id"
FIRE_RANGE = "(t.shard = %s AND t.fire_ms <= %s)"
ARMED_SHARDS = "SELECT shard, armed_ms FROM th_shards WHERE armed_ms > %s"

# Unlocked reads, like get(): a snapshot, each row with its shard's marks.
# STRAIGHT_JOIN: the tasks in index order first, then each one's shard row
# (the optimizer would start from the few shard rows and sort every match).
LIST_TASKS = (
    f"SELECT STRAIGHT_JOIN {TASK_STATE_COLUMNS} FROM {{source}}{WITH_SHARDS}"
    " WHERE {where} ORDER BY {due}, {id} LIMIT %s"
)
# A bulk cancel's next batch: keys only (no payloads), then store.cancel of
# those ids (R7, exact per task) in a transaction of its own.
MATCH_KEYS = "SELECT {due}, {id} FROM {source} WHERE {where} ORDER BY {due}, {id} LIMIT %s"
COUNT_WHERE = "SELECT STRAIGHT_JOIN COUNT(*) FROM {source}{shards} WHERE {where}"
# A count that stops at a cap (the LIMIT): it reads at most that many matches.
COUNT_UP_TO = (
    "SELECT COUNT(*) FROM (SELECT STRAIGHT_JOIN 1 FROM {source}{shards} WHERE {where} LIMIT %s) c"
)
# Per routing key and bucket; covering (th_tasks_listed has routing_key) unless by
# tag. The LIMIT: one row more than a timeline may hold (domain/listing.py).
TIMELINE = (
    "SELECT t.routing_key, ({due} - %s) DIV %s AS bucket, COUNT(*) FROM {source}"
    " WHERE {where} GROUP BY t.routing_key, bucket LIMIT %s"
)

# The terms of a WHERE, joined by AND (TRUE when none).
AFTER_KEY = "({due} > %s OR ({due} = %s AND {id} > %s))"
DUE_FROM = "{due} >= %s"
DUE_BEFORE = "{due} < %s"
ID_RANGE = "t.id >= %s AND t.id < %s"
# The stored key: a row this release wrote always has one (the default when
# none was given); a NULL written by hand reads back as the default but is not matched.
HAS_KEY = "t.routing_key = %s"
HAS_TAG = "g.tag = %s"

# Metrics. COUNT(*) walks an index: run it rarely (metrics_recount_s).
COUNT_TASKS = "SELECT COUNT(*) FROM th_tasks"

# The earliest due time: the first entry of th_tasks_listed, cheap at any size.
EARLIEST_DUE = "SELECT MIN(due_ms) FROM th_tasks"

# Per session, MariaDB only (see ConnectionPool): abort a transaction left idle
# this many seconds, freeing its locks.
IDLE_TRANSACTION_TIMEOUT = "SET SESSION idle_transaction_timeout = %s"

# Per session, MariaDB only (see ConnectionPool): stop any statement running
# this many seconds, just before the client would stop waiting for it.
STATEMENT_TIME_LIMIT = "SET SESSION max_statement_time = %s"

# Per session, MySQL's (milliseconds; SELECTs only): the listing reads' pool.
SELECT_TIME_LIMIT = "SET SESSION max_execution_time = %s"

# Stop the statement a session runs (the listing reads', when their caller is gone).
KILL_QUERY = "KILL QUERY %s"

# The session's TLS cipher: empty when it is not encrypted (see store/mysql/drivers.py).
SESSION_CIPHER = "SHOW SESSION STATUS LIKE 'Ssl_cipher'"

# The server's clock, in epoch microseconds (see NOW_MS).
DATABASE_TIME_US = "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

# Galera's view of this node (triggerhook/store/mysql/galera.py); no rows elsewhere.
GALERA_STATUS = (
    "SHOW GLOBAL STATUS WHERE Variable_name IN "
    "('wsrep_cluster_size', 'wsrep_local_cert_failures', 'wsrep_local_bf_aborts')"
)
