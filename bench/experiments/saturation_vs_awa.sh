#!/usr/bin/env bash
# Experiment: jq's completion rate at saturation against awa's, on one private cluster. Each
# round runs, per consumer count, jq then awa, each with producers that keep DEPTH jobs ready:
# jq through `jq-bench saturate` (bench/driver/src/saturate.rs: 4 producer connections,
# jq.enqueue_many of 10 jobs per call; consumers long-poll jq.claim(n => 10, wait => 1 s) +
# jq.complete_many), awa through bench/peers/awa_pressure.py --saturate (4 producer coroutines,
# enqueue_many_copy; one awa worker runtime with max_workers = consumers, async no-op
# handler, awa's defaults otherwise, its maintenance leader running). jq's rate is counted in
# the database after a 3-s warm-up; awa's from its handlers' starts, over the segment after a
# 3-s warm-up segment. Prints each cell's line, then per consumer count the median rates and
# the median of the per-round ratios jq / awa (the issue's goal: at least 1.5).
#
# Usage: bench/experiments/saturation_vs_awa.sh [ROUNDS] [SECS] [DEPTH]   (defaults 3, 20, 4000)
#   CONSUMERS ["16 64"]. jq must be installed into PG_CONFIG's PostgreSQL (tools/install
#   --release); bench/peers/awa_setup.sh creates awa's venv (AWA_PYTHON). JQ_BENCH_PORT [24476],
#   JQ_BENCH_DATA [/tmp/jq-bench-sat].
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}; secs=${2:-20}; depth=${3:-4000}; cells=${CONSUMERS:-16 64}
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config || echo /usr/lib/postgresql/15/bin/pg_config)}
export JQ_PG_BIN=$("$PG_CONFIG" --bindir)
AWA_PYTHON=${AWA_PYTHON:-$PWD/bench/.peers/awa-venv/bin/python}
[ -x "$AWA_PYTHON" ] || { echo "saturation_vs_awa.sh: $AWA_PYTHON is absent (bench/peers/awa_setup.sh creates it)" >&2; exit 1; }
D=${JQ_BENCH_DATA:-/tmp/jq-bench-sat}; P=${JQ_BENCH_PORT:-24476}
cargo build -q --release -p jq-bench
bin=target/release/jq-bench
source pg_test/cluster.sh
jq_cluster_stop "$D" || true; rm -rf "$D"
trap 'jq_cluster_stop "$D"' EXIT
jq_cluster_start "$D" "$P" shared_buffers=1GB max_wal_size=8GB synchronous_commit=off \
    shared_preload_libraries=jq jq.databases=jq max_connections=200
export PGOPTIONS="-c client_min_messages=warning"
q() { local db=$1; shift; "$JQ_PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$P" -U postgres -d "$db" "$@"; }
q postgres -c "CREATE DATABASE jq" -c "CREATE DATABASE awa"
q jq -c "CREATE EXTENSION jq" -c "SELECT jq.create_queue('q')" >/dev/null
"$AWA_PYTHON" bench/peers/awa_pressure.py "postgresql://postgres@127.0.0.1:$P/awa" --migrate-only
declare -A jq_rate awa_rate
for r in $(seq 1 "$rounds"); do
    for c in $cells; do
        q jq -c "TRUNCATE jq.jobs, jq.execution_log" -c "VACUUM ANALYZE jq.jobs" -c "CHECKPOINT" >/dev/null
        line=$("$bin" saturate "postgresql://postgres@127.0.0.1:$P/jq" q "$depth" "$c" "$secs")
        echo "round $r consumers $c jq: $line"
        jq_rate[$c]="${jq_rate[$c]:-} $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["completed_per_s"])' "$line")"
        q awa -c "CHECKPOINT" >/dev/null
        out=$(mktemp)
        line=$("$AWA_PYTHON" bench/peers/awa_pressure.py "postgresql://postgres@127.0.0.1:$P/awa" q "3:0,$secs:0" "$c" "$out" --saturate "$depth" | tail -n 1)
        rm -f "$out"
        echo "round $r consumers $c awa: $line"
        awa_rate[$c]="${awa_rate[$c]:-} $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["jobs_per_s"][-1])' "$line")"
    done
done
for c in $cells; do
python3 - "$c" "${jq_rate[$c]}" "${awa_rate[$c]}" <<'PY'
import statistics, sys
c, j, a = sys.argv[1], list(map(float, sys.argv[2].split())), list(map(float, sys.argv[3].split()))
ratios = [x / y for x, y in zip(j, a)]
print(f"{c} consumers: jq median {statistics.median(j):.0f} jobs/s, awa median {statistics.median(a):.0f} jobs/s; "
      f"jq / awa per round {' '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f})")
PY
done
