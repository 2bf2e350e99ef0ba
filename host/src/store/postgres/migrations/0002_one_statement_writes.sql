-- Migration 2: a write of runs is one statement (runs.rs says how).
--
-- Usage buckets become counters that a write adds to in place
-- (INSERT … ON CONFLICT DO UPDATE), where version 1 kept each bucket as a
-- JSON record that a write read, locked, decoded, added to and rewrote: at
-- least three statements per write. Fuel saturates at the largest bigint.

ALTER TABLE ax_usage
    ADD COLUMN fuel     bigint NOT NULL DEFAULT 0,
    ADD COLUMN attempts bigint NOT NULL DEFAULT 0,
    ADD COLUMN wall_ms  double precision NOT NULL DEFAULT 0,
    ADD COLUMN outcomes jsonb NOT NULL DEFAULT '{}';

UPDATE ax_usage SET
    fuel = LEAST(coalesce((v ->> 'fuel')::numeric, 0), 9223372036854775807)::bigint,
    attempts = coalesce((v ->> 'attempts')::bigint, 0),
    wall_ms = coalesce((v ->> 'wall_ms')::double precision, 0),
    outcomes = coalesce(v -> 'outcomes', '{}')
FROM (SELECT tenant, hour, task, convert_from(record, 'UTF8')::jsonb AS v FROM ax_usage) AS old
WHERE ax_usage.tenant = old.tenant AND ax_usage.hour = old.hour AND ax_usage.task = old.task;

ALTER TABLE ax_usage DROP COLUMN record;

-- The sum of two maps of counts: {"succeeded": 2} + {"succeeded": 1,
-- "failed": 1} = {"failed": 1, "succeeded": 3}.
CREATE FUNCTION ax_add_counts(a jsonb, b jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_object_agg(key, total), '{}'::jsonb)
    FROM (SELECT key, sum(value::numeric) AS total
          FROM (SELECT * FROM jsonb_each_text(a)
                UNION ALL
                SELECT * FROM jsonb_each_text(b)) AS each_count
          GROUP BY key) AS summed
$$;

-- Refuses a write from inside its one statement, which then stores
-- nothing: SQLSTATE `code` (AX409: the run's stored revision is not the
-- one the write follows; AX422: the write carries another definition than
-- the run's), the run's id as the message, its stored revision as the
-- detail. Called only for a row that is refused, so it never returns.
CREATE FUNCTION ax_refuse(code text, id text, stored bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = id, DETAIL = stored::text;
END
$$;
