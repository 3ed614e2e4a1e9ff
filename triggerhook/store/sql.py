"""Every SQL statement triggerhook runs, in one reviewable place.

All values are bound parameters (``%s``); the only text ever spliced in is a
placeholder list ``%s, %s, ...`` (or ``(%s, %s), ...``) of a computed length
(see :func:`placeholders`).
"""

from __future__ import annotations

# The version schema.sql creates: the last of store/migrations.py's MIGRATIONS.
SCHEMA_VERSION = 2

CREATE_DATABASE = "CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

READ_SCHEMA_VERSION = "SELECT value FROM th_meta WHERE name = 'schema_version'"

# Plain INSERT on purpose: a duplicate id fails the statement (error 1062) and
# the caller falls back to comparing contents; the fast path costs nothing extra.
INSERT_TASKS = (
    "INSERT INTO th_tasks"
    " (id, due_ms, routing_key, payload, claimed_by, claim_until_ms, firing, rev)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)

SELECT_TASKS_BY_IDS = (
    "SELECT id, due_ms, routing_key, payload, firing FROM th_tasks WHERE id IN ({ids})"
)

SELECT_TASK = "SELECT id, due_ms, routing_key, payload, firing FROM th_tasks WHERE id = %s"

# Claim, step 1: the earliest claimable rows, skipping rows another instance is
# claiming right now. Claimable: unclaimed (claim_until_ms = 0) or claim expired.
SELECT_CLAIMABLE = (
    "SELECT id, due_ms, routing_key, payload, firing, rev, attempts FROM th_tasks"
    " WHERE due_ms <= %s AND claim_until_ms < %s"
    " ORDER BY due_ms LIMIT %s FOR UPDATE SKIP LOCKED"
)

# Claim, step 2 (same transaction). Rows due by the arm horizon are armed at once.
CLAIM_ROWS = (
    "UPDATE th_tasks SET claimed_by = %s, claim_until_ms = %s,"
    " firing = IF(firing = 1 OR due_ms <= %s, 1, 0) WHERE id IN ({ids})"
)

# Arm, step 1: lock those of the rows that are still claimed by us (see
# LOCK_FOR_CANCEL for how this and a cancel exclude each other).
LOCK_ARMABLE = (
    "SELECT id, rev, firing FROM th_tasks WHERE id IN ({ids}) AND claimed_by = %s FOR UPDATE"
)

ARM_ROWS = "UPDATE th_tasks SET firing = 1 WHERE id IN ({ids})"

# After the broker's confirm: the confirmed revision only. Whoever runs it,
# whenever (an instance paused past its lease, say), it cannot remove a newer
# incarnation of the id, which has another revision.
DELETE_FIRED = "DELETE FROM th_tasks WHERE (id, rev) IN ({pairs}) AND firing = 1"

# Renewal names the ids held in memory: a row claimed by us that we no longer
# hold (for whatever reason) is left to expire and be claimed again.
RENEW_CLAIMS = "UPDATE th_tasks SET claim_until_ms = %s WHERE claimed_by = %s AND id IN ({ids})"

RELEASE_CLAIMS = "UPDATE th_tasks SET claimed_by = NULL, claim_until_ms = 0 WHERE claimed_by = %s"

RELEASE_SOME_CLAIMS = (
    "UPDATE th_tasks SET claimed_by = NULL, claim_until_ms = 0"
    " WHERE claimed_by = %s AND id IN ({ids})"
)

# Cancel locks the rows first: an arm in progress finishes before (the row
# then says firing = 1: too late) or waits until the DELETE committed (the
# row is gone: the armer drops the task). Exactly one of them wins.
LOCK_FOR_CANCEL = "SELECT id, firing FROM th_tasks WHERE id IN ({ids}) FOR UPDATE"

CANCEL = "DELETE FROM th_tasks WHERE id IN ({ids}) AND firing = 0"

# Reschedule locks like cancel (same exclusion with the armer), then moves each
# unarmed row with a new revision: any copy held in memory then fails to arm.
LOCK_FOR_RESCHEDULE = (
    "SELECT id, due_ms, routing_key, payload, firing FROM th_tasks WHERE id IN ({ids}) FOR UPDATE"
)

RESCHEDULE = (
    "UPDATE th_tasks SET due_ms = %s, rev = %s, claimed_by = %s, claim_until_ms = %s,"
    " firing = %s, attempts = 0 WHERE id = %s AND firing = 0"
)

# An event the broker did not take, to be tried again later: the row is
# disarmed (cancel and reschedule work on it again), unclaimed (it leaves this
# instance's memory, so it holds no room), claimable by anyone from
# claim_until_ms on, and gets a new revision. Only our armed copy at the
# revision we hold is moved.
DEFER_UNDELIVERED = (
    "UPDATE th_tasks SET firing = 0, claimed_by = NULL, claim_until_ms = %s,"
    " attempts = attempts + 1, rev = %s"
    " WHERE id = %s AND rev = %s AND claimed_by = %s AND firing = 1"
)


def placeholders(count: int, width: int = 1) -> str:
    """``%s, %s, ...`` for an IN list of ``count`` bound values; with ``width``
    2, ``(%s, %s), ...`` for a list of pairs."""
    if count < 1:
        raise ValueError("an IN list needs at least one value")
    one = "%s" if width == 1 else f"({', '.join(['%s'] * width)})"
    return ", ".join([one] * count)


# Metrics. COUNT(*) walks an index: run it rarely (metrics_recount_s).
COUNT_TASKS = "SELECT COUNT(*) FROM th_tasks"

# The first entry of the due-time index: cheap at any table size.
EARLIEST_DUE = "SELECT MIN(due_ms) FROM th_tasks"

# Per session, MariaDB only (see ConnectionPool): abort a transaction left idle
# this many seconds, freeing its locks.
IDLE_TRANSACTION_TIMEOUT = "SET SESSION idle_transaction_timeout = %s"

# The server's clock, in epoch microseconds. UTC arithmetic only: no session
# time zone (and no daylight-saving fold) is involved.
DATABASE_TIME_US = "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
