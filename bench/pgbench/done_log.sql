-- The completion log of the drain cells (jq and pgmq databases; bench/pgbench/floor.sql has the floor's):
-- every complete inserts the job's id in the same statement, so a job completed twice violates
-- the key and aborts that pgbench client (the cell then fails).
CREATE TABLE bench_done (id bigint PRIMARY KEY);
