#!/usr/bin/env bash
# Experiment behind docs/BENCHMARKS.md's held-snapshot notes: jq's SQL drain at batch 10 with 16
# connections from a 1.2M backlog, a REPEATABLE READ snapshot held from t=10 s to t=30 s, and
# pg_stat_user_indexes / pg_statio_user_tables of jq.jobs sampled at t = 5, 8, 31, 45, 55 s.
# JQ_DATABASES=jq (default) runs jq's maintenance worker in the database; JQ_DATABASES=postgres
# keeps it out (the worker serves only databases listed there that have the extension).
# SYSTEM=floor runs the raw-SQL floor instead (bench/pgbench/floor.sql, in the same database).
# Usage: [PG_CONFIG=...] [JQ_DATABASES=postgres] [SYSTEM=floor] bench/experiments/snapshot_idx.sh
set -euo pipefail
SYSTEM=${SYSTEM:-jq}
cd "$(dirname "$0")/../.."
source pg_test/cluster.sh
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config || echo /usr/lib/postgresql/15/bin/pg_config)}
export JQ_PG_BIN=$("$PG_CONFIG" --bindir)
D=${JQ_BENCH_DATA:-/tmp/jq-bench-exp-snap}; P=${JQ_BENCH_PORT:-24464}
jq_cluster_stop $D || true; rm -rf $D
trap 'jq_cluster_stop $D' EXIT
jq_cluster_start $D $P shared_buffers=2GB max_wal_size=8GB fsync=on full_page_writes=on synchronous_commit=off shared_preload_libraries=jq jq.databases=${JQ_DATABASES:-jq}
export PGOPTIONS="-c client_min_messages=warning"
q() { $JQ_PG_BIN/psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $P -U postgres -d jq "$@"; }
$JQ_PG_BIN/psql -X -q -h 127.0.0.1 -p $P -U postgres -d postgres -c "CREATE DATABASE jq"
if [ "$SYSTEM" = jq ]; then
    q -c "CREATE EXTENSION jq" -f bench/pgbench/done_log.sql -c "SELECT jq.create_queue('q')" >/dev/null
    for i in $(seq 1 12); do q -c "SELECT count(*) FROM jq.enqueue_many('q', (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, 100000)))" >/dev/null; done
    tables="'jobs','execution_log'"; script=bench/pgbench/jq_claim_complete_b10.pgbench; main=jobs
else
    q -f bench/pgbench/floor.sql
    q -c "INSERT INTO floor_jobs (queue, state, payload) SELECT 'q', 'ready', '{\"n\":1}' FROM generate_series(1, 1200000)"
    tables="'floor_jobs'"; script=bench/pgbench/floor_claim_complete_b10.pgbench; main=floor_jobs
fi
q -c "VACUUM ANALYZE" -c "CHECKPOINT"
snap() { echo "== t=$1 done=$(q -c 'select count(*) from bench_done')"; q -c "select indexrelname, idx_scan, idx_tup_read, idx_tup_fetch, pg_relation_size(indexrelid)/8192 as pages from pg_stat_user_indexes where relname in ($tables) order by 1" -c "select 'heap', heap_blks_read+heap_blks_hit, idx_blks_read+idx_blks_hit from pg_statio_user_tables where relname='$main'" -c "select relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_dead_tup from pg_stat_user_tables where relname in ($tables)"; }
$JQ_PG_BIN/pgbench -n -h 127.0.0.1 -p $P -U postgres -M prepared -c 16 -j 2 -T 62 -f $script jq >/dev/null 2>&1 &
sleep 5; snap 5; sleep 3; snap 8
( $JQ_PG_BIN/psql -X -q -h 127.0.0.1 -p $P -U postgres -d jq -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM bench_done" -c "SELECT pg_sleep(20)" -c "COMMIT" >/dev/null & )
sleep 21; snap 31; sleep 14; snap 45; sleep 10; snap 55
wait
