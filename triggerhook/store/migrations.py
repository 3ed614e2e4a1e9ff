"""Schema migrations: how a database made by an older version is upgraded.

``MIGRATIONS[v]`` takes schema version ``v - 1`` to ``v``; ``db init`` (see
``MySQLStore``'s ``init_schema``) applies them in order. Each ends by writing
its version, so an interrupted upgrade resumes where it stopped (DDL commits
implicitly in MySQL; a column that exists already is taken as applied).
``schema.sql`` always creates the current version from scratch.
"""

from __future__ import annotations

MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 2: failed deliveries per task (undeliverable events are retried, then dead-lettered).
    2: (
        "ALTER TABLE th_tasks ADD COLUMN attempts INT NOT NULL DEFAULT 0 AFTER rev",
        "UPDATE th_meta SET value = '2' WHERE name = 'schema_version'",
    ),
}
