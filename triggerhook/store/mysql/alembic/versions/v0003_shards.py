"""Version 3: shards (th_shards, th_members; claims per row replaced); store/mysql/migrations.py.

Offline: every instance must be stopped (an instance of version 2 would go on
claiming rows by columns this revision drops). Rewrites every task row, in
chunks; interrupted, it resumes when run again.
"""

from __future__ import annotations

from alembic import op

from triggerhook.store.mysql.migrations import cursor_of, to_v3

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade(shard_count: int) -> None:
    with cursor_of(op.get_bind()) as cur:
        to_v3(cur, shard_count)
