-- ax on PostgreSQL: the schema of store format 1 (docs/ARCHITECTURE.md,
-- "The PostgreSQL store"). Records are the same JSON the API and the sled
-- store use, as bytes in `record` (bytea, not jsonb: jsonb refuses the
-- escaped NUL a plugin's output may hold, and parsing it on every write is
-- work nothing reads back); the columns beside it are what is indexed,
-- constrained or counted. Times are milliseconds since the epoch (bigint),
-- as in the records. Every text column sorts by bytes (COLLATE "C"), as
-- the sled store's keys do, whatever the database's collation.

-- Metadata values (admin token hash, format markers).
CREATE TABLE ax_meta (
    key   text COLLATE "C" PRIMARY KEY,
    value text COLLATE "C" NOT NULL
);

-- Catalog ------------------------------------------------------------------

-- Plugin components, content-addressed: one row per distinct component,
-- whoever uploaded it.
CREATE TABLE ax_blobs (
    digest text COLLATE "C" PRIMARY KEY,
    bytes  bytea NOT NULL
);

CREATE TABLE ax_plugins (
    tenant  text COLLATE "C" NOT NULL,
    name    text COLLATE "C" NOT NULL,
    version text COLLATE "C" NOT NULL,
    digest  text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (tenant, name, version)
);
CREATE INDEX ax_plugins_digest ON ax_plugins (digest);

CREATE TABLE ax_plugin_tags (
    tenant text COLLATE "C" NOT NULL,
    name   text COLLATE "C" NOT NULL,
    tag    text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (tenant, name, tag)
);

CREATE TABLE ax_tasks (
    tenant text COLLATE "C" NOT NULL,
    name   text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- The `after` index: which tasks a finished task triggers.
CREATE TABLE ax_task_upstreams (
    tenant   text COLLATE "C" NOT NULL,
    upstream text COLLATE "C" NOT NULL,
    task     text COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant, upstream, task),
    FOREIGN KEY (tenant, task) REFERENCES ax_tasks (tenant, name) ON DELETE CASCADE
);

CREATE TABLE ax_schedules (
    tenant    text COLLATE "C" NOT NULL,
    task      text COLLATE "C" NOT NULL,
    -- Unpaused schedules' next fire: the next-fire index; NULL otherwise.
    next_fire bigint,
    record bytea NOT NULL,
    PRIMARY KEY (tenant, task)
);
CREATE INDEX ax_schedules_next_fire ON ax_schedules (next_fire, tenant, task)
    WHERE next_fire IS NOT NULL;

-- Runs ---------------------------------------------------------------------

CREATE TABLE ax_runs (
    id       text COLLATE "C" PRIMARY KEY,
    tenant   text COLLATE "C" NOT NULL,
    task     text COLLATE "C" NOT NULL,
    status   text COLLATE "C" NOT NULL,
    revision bigint NOT NULL,
    -- sha256 of the run's task definition: fixed when the run is inserted.
    spec_digest text COLLATE "C" NOT NULL,
    -- The persistent queue's order while queued (rules::queue_position).
    queue_position bigint,
    -- Bytes of the record as stored, counted in ax_tenant_bytes.
    bytes    bigint NOT NULL,
    record bytea NOT NULL
);
CREATE INDEX ax_runs_tenant ON ax_runs (tenant, id);
CREATE INDEX ax_runs_task ON ax_runs (tenant, task, id);
-- The persistent queue: each tenant's queued runs in dispatch order.
CREATE INDEX ax_runs_queue ON ax_runs (tenant, queue_position, id)
    WHERE status = 'queued';
CREATE INDEX ax_runs_running ON ax_runs (id) WHERE status = 'running';

-- One run per (tenant, task, scheduled_for) for runs inserted with
-- `unique_fire`: a schedule fires once per instant, whoever fires it.
CREATE TABLE ax_fires (
    tenant        text COLLATE "C" NOT NULL,
    task          text COLLATE "C" NOT NULL,
    scheduled_for bigint NOT NULL,
    run_id        text COLLATE "C" NOT NULL REFERENCES ax_runs (id) ON DELETE CASCADE,
    PRIMARY KEY (tenant, task, scheduled_for)
);

-- Idempotency keys outlive their runs (retention) until they expire, so no
-- foreign key to ax_runs.
CREATE TABLE ax_idempotency_keys (
    tenant     text COLLATE "C" NOT NULL,
    task       text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    run_id     text COLLATE "C" NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (tenant, task, key)
);
CREATE INDEX ax_idempotency_keys_expiry ON ax_idempotency_keys (expires_at);

CREATE TABLE ax_events (
    run_id text COLLATE "C" NOT NULL REFERENCES ax_runs (id) ON DELETE CASCADE,
    seq    bigint GENERATED ALWAYS AS IDENTITY,
    bytes  bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- An attempt's captured output and its record (`record:`) may be written
-- before the run they belong to is (no foreign key); delete_run removes
-- them. `tenant` is who the bytes are charged to (ax_tenant_bytes).
CREATE TABLE ax_logs (
    run_id  text COLLATE "C" NOT NULL,
    step    text COLLATE "C" NOT NULL,
    attempt bigint NOT NULL,
    tenant  text COLLATE "C" NOT NULL,
    bytes   bigint NOT NULL,
    record  bytea NOT NULL,
    PRIMARY KEY (run_id, step, attempt)
);

CREATE TABLE ax_attempt_records (
    run_id  text COLLATE "C" NOT NULL,
    step    text COLLATE "C" NOT NULL,
    attempt bigint NOT NULL,
    tenant  text COLLATE "C" NOT NULL,
    bytes   bigint NOT NULL,
    record  bytea NOT NULL,
    PRIMARY KEY (run_id, step, attempt)
);

CREATE TABLE ax_dead_letters (
    id     text COLLATE "C" PRIMARY KEY,
    tenant text COLLATE "C" NOT NULL,
    open   boolean NOT NULL,
    record bytea NOT NULL
);
CREATE INDEX ax_dead_letters_tenant ON ax_dead_letters (tenant, id);

-- Bytes of run data per tenant (Runs::run_bytes), counted as runs and logs
-- are written and deleted, in the same transaction.
CREATE TABLE ax_tenant_bytes (
    tenant text COLLATE "C" PRIMARY KEY,
    bytes  bigint NOT NULL
);

-- Tenancy ------------------------------------------------------------------

CREATE TABLE ax_tenants (
    name   text COLLATE "C" PRIMARY KEY,
    record bytea NOT NULL
);

CREATE TABLE ax_tokens (
    id     text COLLATE "C" PRIMARY KEY,
    record bytea NOT NULL
);

CREATE TABLE ax_usage (
    tenant text COLLATE "C" NOT NULL,
    hour   bigint NOT NULL,
    task   text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (tenant, hour, task)
);

-- Leases: who does the work only one process may do, until when.
CREATE TABLE ax_leases (
    name   text COLLATE "C" PRIMARY KEY,
    holder text COLLATE "C" NOT NULL,
    until  bigint NOT NULL,
    token  bigint NOT NULL
);

-- The alert outbox -----------------------------------------------------------

CREATE TABLE ax_alerts (
    id       text COLLATE "C" PRIMARY KEY,
    tenant   text COLLATE "C" NOT NULL,
    status   text COLLATE "C" NOT NULL,
    next_try bigint NOT NULL,
    record bytea NOT NULL
);
CREATE INDEX ax_alerts_tenant ON ax_alerts (tenant, status, id);
CREATE INDEX ax_alerts_due ON ax_alerts (next_try, id) WHERE status = 'pending';

-- Plugins' key-value store and tenants' secrets: ordered byte maps, as on
-- sled (store/kv.rs, store/secrets.rs), one per `tree`.
CREATE TABLE ax_maps (
    tree  text COLLATE "C" NOT NULL,
    key   bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (tree, key)
);
