#!/usr/bin/env bash
# Quick SQL-level drain comparison: jq.claim + jq.complete (batch 1) and jq.claim(n => 10) +
# jq.complete_many (batch 10) against the raw-SQL floor of bench/pgbench/floor.sql (the
# same at-least-once contract: claim in one transaction, complete in a second), interleaved
# rounds on one private cluster with synchronous_commit=off, 8 pgbench clients, no-op jobs.
# A development aid; bench/run is the benchmark.
#
# Usage: bench/experiments/quick_ratio.sh [ROUNDS] [SECONDS]      (defaults: 3 rounds of 8 s per cell)
# KINDS=1 adds a third cell per round, interleaved with the others: jq with 10 job kinds defined
# on the queue (one of them the jobs' own kind, the queue's name, with a timeout and a backoff), created before
# the cell's jobs are enqueued and dropped before the next cell, so that the cost of kinds is read from the same run.
# Needs jq installed in the system PostgreSQL 15 (tools/install --release).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}; secs=${2:-8}; clients=8
port=${JQ_BENCH_PORT:-24450}; data=${JQ_BENCH_DATA:-/tmp/jq-bench-quick}
source pg_test/cluster.sh
jq_cluster_stop "$data" || true; rm -rf "$data"
trap 'jq_cluster_stop "$data"' EXIT
jq_cluster_start "$data" "$port" shared_buffers=1GB max_wal_size=8GB
export PGOPTIONS="-c client_min_messages=warning"
p() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d bench "$@"; }
psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE bench"
p -c "CREATE EXTENSION jq" -f bench/pgbench/floor.sql -c "SELECT jq.create_queue('q')" >/dev/null
n=$(( secs * 40000 ))   # more than either system drains in one cell
cell() {  # system, script, jobs per transaction
    p -c "TRUNCATE floor_jobs; TRUNCATE jq.jobs; TRUNCATE jq.execution_log; TRUNCATE bench_done"
    # Kinds before the jobs, so that each job takes its kind's max_attempts and timeout at enqueue
    # (and its claim caps the lease at the timeout).
    if [ "${4:-}" = kinds ]; then
        p -c "SELECT count(jq.alter_kind('q', CASE WHEN i = 1 THEN 'q' ELSE 'k' || i END, max_attempts => 5,
                                          timeout => '1 hour', backoff_base => '2 seconds')) FROM generate_series(1, 10) i" >/dev/null
    else
        p -c "SELECT count(jq.drop_kind('q', k.kind)) FROM jq.kind_policies k WHERE k.queue = 'q'" >/dev/null
    fi
    if [ "$1" = floor ]; then
        p -c "INSERT INTO floor_jobs (queue, state, payload) SELECT 'q', 'ready', '{\"n\":1}' FROM generate_series(1, $n)"
    else
        p -c "SELECT count(*) FROM jq.enqueue_many('q', (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $n)))" >/dev/null
    fi
    p -c "VACUUM ANALYZE" -c "CHECKPOINT"
    pgbench -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -c "$clients" -j 2 -T "$secs" -f "bench/pgbench/$2" bench 2>&1 \
        | awk -v per="$3" '/^tps/ { printf "%.0f\n", $3 * per }'
}
for batch in 1 10; do
    suffix=$([ "$batch" = 1 ] && echo "" || echo "_b$batch")
    f=(); j=(); k=()
    for r in $(seq 1 "$rounds"); do
        f+=("$(cell floor "floor_claim_complete$suffix.pgbench" "$batch")")
        j+=("$(cell jq "jq_claim_complete$suffix.pgbench" "$batch")")
        if [ "${KINDS:-0}" = 1 ]; then
            k+=("$(cell jq "jq_claim_complete$suffix.pgbench" "$batch" kinds)")
            echo "batch $batch round $r: floor ${f[-1]} jobs/s, jq ${j[-1]} jobs/s, jq with 10 kinds ${k[-1]} jobs/s"
        else
            echo "batch $batch round $r: floor ${f[-1]} jobs/s, jq ${j[-1]} jobs/s"
        fi
    done
    python3 - "$batch" "${f[*]}" "${j[*]}" "${k[*]:-}" <<'PY'
import statistics, sys
batch, f, j = sys.argv[1], list(map(float, sys.argv[2].split())), list(map(float, sys.argv[3].split()))
k = list(map(float, sys.argv[4].split()))
r = [b / a for a, b in zip(f, j)]
print(f"batch {batch}: floor median {statistics.median(f):.0f} jobs/s, jq median {statistics.median(j):.0f} jobs/s, "
      f"jq/floor median {statistics.median(r):.2f} (min {min(r):.2f}, max {max(r):.2f})")
if k:
    rk = [b / a for a, b in zip(f, k)]
    print(f"batch {batch}: jq with 10 kinds median {statistics.median(k):.0f} jobs/s, jq/floor median "
          f"{statistics.median(rk):.2f} (min {min(rk):.2f}, max {max(rk):.2f}); "
          f"with kinds / without, same round, median {statistics.median([b / a for a, b in zip(j, k)]):.3f}")
PY
done
