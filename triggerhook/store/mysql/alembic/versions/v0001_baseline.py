"""Version 1, the baseline: th_tasks with claims per row, and th_meta.

Creates nothing. A database of version 1 (or later) made before Alembic is
stamped at its version's revision, then upgraded; a new database is created at
head from schema.sql and stamped there (triggerhook.store.mysql.schema).
"""

from __future__ import annotations

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade(shard_count: int) -> None:
    """Nothing to do: see the module's docstring."""
