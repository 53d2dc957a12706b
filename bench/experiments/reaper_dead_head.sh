#!/usr/bin/env bash
# Experiment behind docs/BENCHMARKS.md's 5-minute held-snapshot notes: does the reaper's scan
# (jobs_running_idx, lease_expires_at < now) walk the dead versions claims left there once
# their leases have expired while a REPEATABLE READ snapshot is held? A queue with a 2-s lease
# (the test skips the clock this way, not a component), 200k jobs, 160k of them drained at
# batch 10 under the held snapshot; then the reaper's SELECT under EXPLAIN (ANALYZE, BUFFERS),
# twice with the snapshot held and twice after its end. jq's background worker is kept out of
# the database (jq.databases), so only these calls touch the index.
# Usage: bench/experiments/reaper_dead_head.sh   (jq installed into PG_CONFIG; port 25530, /tmp/jq-reaper-exp)
set -uo pipefail
cd "$(dirname "$0")/../.."
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config || echo /usr/lib/postgresql/15/bin/pg_config)}
export JQ_PG_BIN=$("$PG_CONFIG" --bindir)
source pg_test/cluster.sh
D=/tmp/jq-reaper-exp; P=25530
jq_cluster_stop $D >/dev/null 2>&1; rm -rf $D
jq_cluster_start $D $P shared_preload_libraries=jq "jq.databases='none'" >/dev/null || exit 1
# The reaper's scan (jq._reap's batch), under EXPLAIN.
REAP="EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT x.id FROM jq.jobs x WHERE x.state = 'running' AND x.lease_expires_at < now() ORDER BY x.lease_expires_at LIMIT 100 FOR UPDATE SKIP LOCKED"
ps() { $JQ_PG_BIN/psql -X -q -h 127.0.0.1 -p $P -U postgres -d jqx "$@"; }
$JQ_PG_BIN/psql -X -q -h 127.0.0.1 -p $P -U postgres -d postgres -c "CREATE DATABASE jqx"
ps -c "CREATE EXTENSION jq" -c "SELECT jq.create_queue('q', lease => interval '2 seconds')" -f bench/pgbench/done_log.sql >/dev/null
ps -c "SELECT count(*) FROM jq.enqueue_many('q', (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, 200000)))" >/dev/null
ps -c "VACUUM ANALYZE jq.jobs"
# hold a snapshot
( $JQ_PG_BIN/psql -X -q -h 127.0.0.1 -p $P -U postgres -d jqx -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM jq.queues" -c "SELECT pg_sleep(120)" -c "COMMIT" >/dev/null 2>&1 & )
sleep 1
$JQ_PG_BIN/pgbench -n -h 127.0.0.1 -p $P -U postgres -M prepared -c 4 -j 2 -t 4000 -f bench/pgbench/jq_claim_complete_b10.pgbench jqx 2>&1 | grep -E "^tps|processed"
sleep 3
echo "--- reaper's scan while the snapshot is held (every claimed version's lease has expired)"
ps -c "$REAP"
ps -c "$REAP"
ps -c "SELECT count(*) AS running_live FROM jq.jobs WHERE state = 'running'"
# end the snapshot
ps -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'jqx' AND query LIKE '%pg_sleep%' AND pid <> pg_backend_pid()" >/dev/null
sleep 1
echo "--- after the snapshot's end: first and second pass"
ps -c "$REAP"
ps -c "$REAP"
jq_cluster_stop $D >/dev/null
