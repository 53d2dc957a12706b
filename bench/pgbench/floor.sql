-- The raw-SQL floor, the minimal at-least-once queue in plain SQL (docs/BENCHMARKS.md, "Method"):
-- claim in one transaction, complete in a second, same contract as jq, one partial index.
CREATE TABLE floor_jobs (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    state text NOT NULL,
    priority int NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(),
    attempt int NOT NULL DEFAULT 0,
    worker text,
    lease_token uuid,
    lease_expires_at timestamptz,
    payload jsonb NOT NULL
);
CREATE INDEX floor_claim_idx ON floor_jobs (queue, priority DESC, run_at, id) WHERE state = 'ready';
-- The completion log of the drain cells: every complete inserts the job's id in the same
-- statement; a second completion of one job would violate the key and abort that pgbench client.
CREATE TABLE bench_done (id bigint PRIMARY KEY);
