"""Version 5: the dedup window's fired records (th_fired) and the outbox
(th_outbox): store/mysql/migrations.py."""

from __future__ import annotations

from alembic import op

from triggerhook.store.mysql.migrations import cursor_of, to_v5

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade(shard_count: int) -> None:
    with cursor_of(op.get_bind()) as cur:
        to_v5(cur)
