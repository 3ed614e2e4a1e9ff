"""Version 4: task metadata (th_tasks.meta, th_task_tags), listing keys: mysql/migrations.py."""

from __future__ import annotations

from alembic import op

from triggerhook.store.mysql.migrations import cursor_of, to_v4

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade(shard_count: int) -> None:
    with cursor_of(op.get_bind()) as cur:
        to_v4(cur)
