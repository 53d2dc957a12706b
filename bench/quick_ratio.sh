#!/usr/bin/env bash
# Quick SQL-level drain comparison at batch 1: jq.claim + jq.complete against the raw-SQL floor,
# interleaved rounds on one private cluster (synchronous_commit=off). A development aid; the
# full suite comes with the benchmarks issue. Usage: bench/quick_ratio.sh [ROUNDS] [SECONDS] [CLIENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}; secs=${2:-10}; clients=${3:-8}
port=${JQ_BENCH_PORT:-54450}; data=${JQ_BENCH_DATA:-/tmp/jq-bench-quick}
source pg_test/cluster.sh
jq_cluster_stop "$data" || true; rm -rf "$data"
trap 'jq_cluster_stop "$data"' EXIT
jq_cluster_start "$data" "$port" shared_buffers=1GB max_wal_size=8GB
p() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d bench "$@"; }
psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE bench"
p -c "CREATE EXTENSION jq" -f bench/floor.sql -c "SELECT jq.create_queue('q')"
n=$(( secs * 40000 ))
for r in $(seq 1 "$rounds"); do
    for sys in floor jq; do
        p -c "TRUNCATE floor_jobs; TRUNCATE jq.jobs; TRUNCATE jq.executions"
        if [ $sys = floor ]; then
            p -c "INSERT INTO floor_jobs (queue, state, payload) SELECT 'q', 'ready', '{\"n\":1}' FROM generate_series(1, $n)"
        else
            p -c "SELECT count(*) FROM jq.enqueue_many('q', (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $n)))" >/dev/null
        fi
        p -c "VACUUM ANALYZE" -c "CHECKPOINT"
        tps=$(pgbench -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -c "$clients" -j 2 -T "$secs" \
              -f "bench/${sys}_claim_complete.pgbench" bench 2>&1 | awk '/^tps/ {print $3}')
        echo "round $r $sys jobs/s=$tps"
    done
done
