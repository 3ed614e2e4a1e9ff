"""Schedule a task inside the caller's own database transaction: the outbox
(docs/design/flow-control.md, section 6).

    with engine.begin() as conn:                       # SQLAlchemy, or any DBAPI
        conn.execute(insert(orders).values(...))       # the business write
        schedule_in(conn, TaskSpec(id=f"remind-{order_id}", delay_ms=86_400_000))
    # the task exists if and only if this transaction committed

The task is validated first (bad input raises :class:`ValidationError`
before anything is written), then written into ``th_outbox`` on the
caller's connection, in the caller's transaction, touching no other table.
A running instance's outbox mover (R6o, ``th-outbox``) moves it into the
task table once that transaction has committed, and the task is then an
ordinary one: armed, fired, never early. Its lateness: a task due sooner
than ``outbox_poll_ms`` (50) plus one ``arm_interval_ms`` after the commit
fires that much late at most (plus the mover's queue after a burst).

The id's ``on_conflict`` rule (and its dedup window) apply at the move:
the caller's transaction is gone by then, so an id that exists with other
content (``error``), is being published (``replace``) or fired within its
window is logged and counted by the mover (metric ``outbox_refused``), not
raised here. ``delay_ms`` counts from this host's clock. No configured
default applies here but the routing key's (None: the moving instance's
``default_routing_key``); the payload limit is ``max_payload_bytes``.
"""

from __future__ import annotations

import time

from triggerhook.domain.spec import TaskRules, TaskSpec, conflict_rule, resolve
from triggerhook.domain.task import DEFAULT_MAX_PAYLOAD_BYTES, Task
from triggerhook.interfaces import new_rev
from triggerhook.store.outbox import write_outbox

_STAND_IN_KEY = "default"


def schedule_in(
    connection: object,
    spec: TaskSpec,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    now_ms: float | None = None,
) -> Task:
    """Write ``spec``'s task into the outbox on ``connection`` (a PyMySQL,
    MySQLdb or sqlite3 connection, or a SQLAlchemy ``Connection`` or
    ``Session``, to the daemon's database), uncommitted: the caller commits.
    Returns the task as validated (its routing key empty when the daemon's
    default applies). Raises :class:`~triggerhook.errors.ValidationError`,
    nothing written; the statement's own errors are the driver's."""
    now = time.time() * 1000.0 if now_ms is None else now_ms
    rule = conflict_rule(spec)
    # The daemon's default key is not known here: resolved with a stand-in,
    # stored empty (NULL), which the moving instance reads as its own.
    task = resolve(spec, now, TaskRules(_STAND_IN_KEY, max_payload_bytes))
    if spec.routing_key is None:
        task = task.replace(routing_key="")
    write_outbox(connection, task, new_rev(), rule, int(now))
    return task
