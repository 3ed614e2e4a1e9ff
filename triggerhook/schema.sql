-- triggerhook schema, version 6. MySQL 8.0+ / MariaDB 10.6+, InnoDB, utf8mb4.
-- Applied idempotently by `triggerhook db init`; every statement is safe to re-run.
-- A database made by an older version is upgraded by `triggerhook db upgrade` (Alembic,
-- store/alembic/, wrapping store/migrations.py).
-- Statements are separated by lines holding only ';' so the applier needs no SQL parser.
-- The protocol these tables serve: docs/design/ownership.md.

CREATE TABLE IF NOT EXISTS th_tasks (
    -- Caller-chosen or generated (UUIDv4) id, [A-Za-z0-9._:-]{1,64}; binary collation: ids are case-sensitive.
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- CRC32(id) mod the shard count (th_meta.shard_count).
    shard          SMALLINT     NOT NULL,
    -- Random revision, new at every write of content or time: the delete after the
    -- broker's confirm removes the confirmed revision only.
    rev            BIGINT       NOT NULL DEFAULT 0,
    -- The shard's arm_gen when the row was written. The row is armed (committed to
    -- fire; cancel is too late) exactly when (fire_ms, id) <= the shard's
    -- (armed_ms, armed_id) and gen < the shard's arm_gen.
    gen            BIGINT       NOT NULL DEFAULT 0,
    -- When to fire next: the due time, the next try after an undelivered event, or
    -- the instant a rate limit's token comes (throttled).
    fire_ms        BIGINT       NOT NULL,
    -- Due time in milliseconds since the Unix epoch (UTC), as the event says.
    due_ms         BIGINT       NOT NULL,
    -- NULL: the firing instance's default_routing_key.
    routing_key    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    -- NULL: empty body.
    payload        MEDIUMBLOB   NULL,
    -- Tags, AMQP properties and late-fire policy as JSON (domain/meta.py); NULL: none.
    meta           BLOB         NULL,
    -- Deliveries of its event that failed (returned as unroutable, or nacked).
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    -- 1: a rate limit held it back and its row was written back to wait here until
    -- fire_ms (R8p, set by that write); 0: any other write of its time. Last:
    -- version 6 added it in place (no table rebuild).
    throttled      TINYINT      NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    -- Arming reads a shard's rows above its watermark in this order.
    KEY th_tasks_fire (shard, fire_ms, id),
    -- ... and the rows written since its last arming.
    KEY th_tasks_gen (shard, gen, fire_ms, id),
    -- Listing in due order, the timeline's counts per routing key (covering), and
    -- the metrics' oldest overdue task (a row waiting for a retry keeps its due time).
    KEY th_tasks_listed (due_ms, id, routing_key),
    -- Listing and counting one routing key's tasks in due order.
    KEY th_tasks_key (routing_key, due_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
;
CREATE TABLE IF NOT EXISTS th_task_tags (
    -- One row per tag of a task (th_tasks.meta holds them too), for the tag filter
    -- in due order. Written with the task; due_ms follows a reschedule; the
    -- foreign key removes the rows with their task, whoever deletes it.
    tag            VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    due_ms         BIGINT       NOT NULL,
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    PRIMARY KEY (tag, due_ms, id),
    KEY th_task_tags_id (id),
    CONSTRAINT th_task_tags_task FOREIGN KEY (id) REFERENCES th_tasks (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
;
CREATE TABLE IF NOT EXISTS th_shards (
    shard          SMALLINT     NOT NULL PRIMARY KEY,
    -- The instance holding the shard (NULL: free); epoch +1 at every acquisition
    -- (the fencing token every write for the shard checks).
    owner          VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    epoch          BIGINT       NOT NULL DEFAULT 0,
    -- Database time (epoch ms); after it any instance may acquire the shard.
    lease_until_ms BIGINT       NOT NULL DEFAULT 0,
    -- The arm watermark and generation (see th_tasks.gen).
    armed_ms       BIGINT       NOT NULL DEFAULT -4611686018427387904,
    armed_id       VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    arm_gen        BIGINT       NOT NULL DEFAULT 1,
    -- The marks when the current epoch began: rows armed under them are inherited.
    took_ms        BIGINT       NOT NULL DEFAULT -4611686018427387904,
    took_id        VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    took_gen       BIGINT       NOT NULL DEFAULT 1
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
;
CREATE TABLE IF NOT EXISTS th_members (
    -- One row per running process (instance name); token: which process holds it.
    instance           VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    token              BIGINT       NOT NULL,
    heartbeat_until_ms BIGINT       NOT NULL,
    host               VARCHAR(255) NOT NULL DEFAULT '',
    pid                INT          NOT NULL DEFAULT 0,
    started_at         TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
;
CREATE TABLE IF NOT EXISTS th_fired (
    -- A fired task's record, for its dedup window (docs/design/flow-control.md,
    -- section 2): written with the delete after the confirm (R5d); a create of the
    -- id is answered already_fired until expires_ms (epoch ms, the engine's clock).
    -- Its shard is its task's: each owner sweeps its own shards' expired records.
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    shard          SMALLINT     NOT NULL,
    rev            BIGINT       NOT NULL,
    fired_ms       BIGINT       NOT NULL,
    expires_ms     BIGINT       NOT NULL,
    -- The sweep reads a shard's expired records in expiry order.
    KEY th_fired_expiry (shard, expires_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
;
CREATE TABLE IF NOT EXISTS th_outbox (
    -- A task scheduled inside a caller's own transaction (schedule_in; docs/design/
    -- flow-control.md, section 6): visible once that transaction commits, moved into
    -- th_tasks by an instance's outbox mover (R6o) and deleted in the mover's transaction.
    -- In arrival order; the task's columns as th_tasks has them.
    seq            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- The revision its th_tasks row takes.
    rev            BIGINT       NOT NULL,
    due_ms         BIGINT       NOT NULL,
    -- NULL: the moving instance's default_routing_key.
    routing_key    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    payload        MEDIUMBLOB   NULL,
    meta           BLOB         NULL,
    -- What the move does when the id exists: error, keep or replace.
    on_conflict    VARCHAR(16)  CHARACTER SET ascii NOT NULL DEFAULT 'error',
    -- The caller's clock (epoch ms) when it was written: the move's lag.
    created_ms     BIGINT       NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
;
CREATE TABLE IF NOT EXISTS th_meta (
    name  VARCHAR(64)  CHARACTER SET ascii NOT NULL PRIMARY KEY,
    value VARCHAR(255) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
;
INSERT INTO th_meta (name, value) VALUES ('schema_version', '6')
    ON DUPLICATE KEY UPDATE name = name
;
-- '0' until a task with a dedup window is first written, then '1' for good: while it is
-- '0', creates may take a fast path that does not check th_fired (store/mysql/sql.py).
INSERT INTO th_meta (name, value) VALUES ('dedup_windows', '0')
    ON DUPLICATE KEY UPDATE name = name
