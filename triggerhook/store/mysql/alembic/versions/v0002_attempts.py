"""Version 2: failed deliveries per task (th_tasks.attempts); store/mysql/migrations.py."""

from __future__ import annotations

from alembic import op

from triggerhook.store.mysql.migrations import cursor_of, to_v2

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade(shard_count: int) -> None:
    with cursor_of(op.get_bind()) as cur:
        to_v2(cur)
