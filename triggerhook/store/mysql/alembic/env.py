"""Alembic's migration environment for triggerhook's schema.

Run by :mod:`triggerhook.store.mysql.alembic` through Alembic's commands, on the
connection it opened (``config.attributes``); the revisions get the
``shard_count`` setting (for a database that has none stored yet). Online
only: the migrations run statements that depend on what they read, so there
is no ``--sql`` script of them.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationContext, MigrationInfo

log = logging.getLogger("triggerhook.store.mysql.alembic")


def _applied(
    ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]
) -> None:
    done = "recorded (stamp)" if step.is_stamp else "applied"
    log.info("schema revision %s %s", step.up_revision_id, done)


def _run() -> None:
    attributes = context.config.attributes
    connection = attributes.get("connection")
    if context.is_offline_mode() or connection is None:
        raise RuntimeError(
            "triggerhook's schema is migrated by `triggerhook db upgrade` (online only)"
        )
    # MySQL's DDL is not transactional: each revision commits with its version row.
    context.configure(
        connection=connection, transaction_per_migration=True, on_version_apply=_applied
    )
    with context.begin_transaction():
        context.run_migrations(shard_count=attributes["shard_count"])


_run()
