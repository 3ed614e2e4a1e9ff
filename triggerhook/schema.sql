-- triggerhook schema, version 2. MySQL 8.0+ / MariaDB 10.6+, InnoDB, utf8mb4.
-- Applied idempotently by `triggerhook db init`; every statement is safe to re-run.
-- A database made by an older version is upgraded by the migrations in store/sql.py.
-- Statements are separated by lines holding only ';' so the applier needs no SQL parser.

CREATE TABLE IF NOT EXISTS th_tasks (
    -- Caller-chosen or generated (UUIDv4) id, [A-Za-z0-9._:-]{1,64}; binary collation: ids are case-sensitive.
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- Due time in milliseconds since the Unix epoch (UTC).
    due_ms         BIGINT       NOT NULL,
    -- NULL: the firing instance's default_routing_key.
    routing_key    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    -- NULL: empty body.
    payload        MEDIUMBLOB   NULL,
    -- Claim: which engine instance holds the task in memory, and until when (epoch ms).
    -- A claim whose claim_until_ms has passed may be taken by any instance.
    claimed_by     VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    claim_until_ms BIGINT       NOT NULL DEFAULT 0,
    -- 1 once an instance committed to publishing it (armed): cancel is then too late,
    -- and the row is deleted after the broker confirmed the event.
    firing         TINYINT      NOT NULL DEFAULT 0,
    -- Random revision written with the row's content: an in-memory copy is armed
    -- only if its revision still matches (the id may have been cancelled and
    -- scheduled again meanwhile).
    rev            BIGINT       NOT NULL DEFAULT 0,
    -- Deliveries of its event that failed (returned as unroutable, or nacked). While it
    -- waits for the next try the row is unarmed and unclaimed, and claim_until_ms says
    -- when it may be claimed again.
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    -- "The next N claimable tasks due before T" is a range scan on this index; the
    -- claim column in it is checked without reading the row (index condition pushdown).
    KEY th_tasks_due (due_ms, claim_until_ms),
    -- Lease renewal and release of one instance's claims.
    KEY th_tasks_claimed_by (claimed_by)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
;
CREATE TABLE IF NOT EXISTS th_meta (
    name  VARCHAR(64)  CHARACTER SET ascii NOT NULL PRIMARY KEY,
    value VARCHAR(255) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
;
INSERT INTO th_meta (name, value) VALUES ('schema_version', '2')
    ON DUPLICATE KEY UPDATE name = name
