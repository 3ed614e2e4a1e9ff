"""Version 6: a row a rate limit postponed is flagged (th_tasks.throttled):
store/mysql/migrations.py."""

from __future__ import annotations

from alembic import op

from triggerhook.store.mysql.migrations import cursor_of, to_v6

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade(shard_count: int) -> None:
    with cursor_of(op.get_bind()) as cur:
        to_v6(cur)
