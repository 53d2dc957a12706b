#!/usr/bin/env bash
# Per-key serialisation cost (docs/flow-control.md): claim + complete throughput of a plain queue
# against a keyed one (KEYS keys x JOBS_PER_KEY jobs, key_concurrency 1: at any time one job per
# key is ready, the rest blocked), interleaved rounds on one private cluster, 8 pgbench clients,
# synchronous_commit=off, no-op jobs. A development aid like bench/experiments/quick_ratio.sh.
#
# Usage: bench/experiments/flow_keys.sh [ROUNDS] [SECONDS] [KEYS] [JOBS_PER_KEY]   (defaults: 3 8 2000 100)
# Needs jq installed in the PostgreSQL of JQ_PG_BIN (default the system one).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}; secs=${2:-8}; keys=${3:-2000}; per=${4:-100}; clients=8
port=${JQ_BENCH_PORT:-24451}; data=${JQ_BENCH_DATA:-/tmp/jq-bench-keys}
source pg_test/cluster.sh
jq_cluster_stop "$data" || true; rm -rf "$data"
trap 'jq_cluster_stop "$data"' EXIT
jq_cluster_start "$data" "$port" shared_buffers=1GB max_wal_size=8GB synchronous_commit=off
export PGOPTIONS="-c client_min_messages=warning"
p() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d bench "$@"; }
psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE bench"
p -c "CREATE EXTENSION jq" -f bench/pgbench/done_log.sql -c "SELECT jq.create_queue('q')" >/dev/null
n=$(( keys * per ))
cell() {  # keyed: 0 or 1
    p -c "TRUNCATE jq.jobs; TRUNCATE jq.execution_log; TRUNCATE jq.key_slots; TRUNCATE bench_done"
    if [ "$1" = 1 ]; then
        p -c "SELECT count(jq.enqueue('q', '{\"n\":1}', concurrency_key => 'k' || (g % $keys))) FROM generate_series(1, $n) g" >/dev/null
    else
        p -c "SELECT count(*) FROM jq.enqueue_many('q', (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $n)))" >/dev/null
    fi
    p -c "VACUUM ANALYZE" -c "CHECKPOINT"
    pgbench -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -c "$clients" -j 2 -T "$secs" \
        -f bench/pgbench/jq_claim_complete.pgbench bench 2>&1 | awk '/^tps/ { printf "%.0f\n", $3 }'
}
a=(); b=()
for r in $(seq 1 "$rounds"); do
    a+=("$(cell 0)"); b+=("$(cell 1)")
    echo "round $r: plain ${a[-1]} jobs/s, keyed ($keys keys x $per jobs) ${b[-1]} jobs/s"
done
python3 - "${a[*]}" "${b[*]}" <<'PY'
import statistics, sys
a, b = list(map(float, sys.argv[1].split())), list(map(float, sys.argv[2].split()))
r = [y / x for x, y in zip(a, b)]
print(f"plain median {statistics.median(a):.0f} jobs/s, keyed median {statistics.median(b):.0f} jobs/s, "
      f"keyed/plain median {statistics.median(r):.2f} (min {min(r):.2f}, max {max(r):.2f})")
PY
