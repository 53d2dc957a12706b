#!/usr/bin/env bash
# Server time per dashboard page with about 1,000,000 jobs in jq.jobs (docs/dashboard.md, "Speed").
#
# Starts a private cluster (jq installed beforehand: tools/install), loads load.sql (mixed states,
# four queues), starts `jqctl dashboard` on it and requests each page REQUESTS times in turn,
# reading the server's own time from the Server-Timing header (app;dur=MS: from the request's
# arrival at the router to the response, database calls included). Prints median and p95 per page.
#
# Usage: bench/dashboard/run.sh   (env: PG_CONFIG, JQCTL=target/release/jqctl, PORT=25228,
#                                   REQUESTS=50, KEEP=1 to reuse a loaded cluster)
set -euo pipefail
cd "$(dirname "$0")/../.."
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config)}
export JQ_PG_BIN=${JQ_PG_BIN:-$("$PG_CONFIG" --bindir)}
port=${PORT:-25228}
requests=${REQUESTS:-50}
jqctl=${JQCTL:-target/release/jqctl}
dir=/tmp/jq-bench-dashboard-$port
source pg_test/cluster.sh
set +u
if [ "${KEEP:-0}" != 1 ] || [ ! -f "$dir/PG_VERSION" ]; then
    jq_cluster_stop "$dir" 2>/dev/null || true
    rm -rf "$dir"
fi
jq_cluster_start "$dir" "$port" shared_preload_libraries=jq "jq.databases='jq_bench_dash'" jq.tick_interval=1s
trap 'kill "$dash_pid" 2>/dev/null || true; jq_cluster_stop "$dir"' EXIT
psql=("$JQ_PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 -q)
if ! "${psql[@]}" -d jq_bench_dash -c "SELECT 1 FROM jq.queues LIMIT 1" >/dev/null 2>&1; then
    "${psql[@]}" -d postgres -c "CREATE DATABASE jq_bench_dash"
    "${psql[@]}" -d jq_bench_dash -c "CREATE EXTENSION jq"
    # The maintenance worker would promote the scheduled jobs and reap nothing; pause nothing.
    start=$(date +%s)
    "${psql[@]}" -d jq_bench_dash -f bench/dashboard/load.sql
    echo "loaded in $(( $(date +%s) - start )) s"
fi
"${psql[@]}" -d jq_bench_dash -Atc "SELECT 'jq.jobs rows: ' || count(*) FROM jq.jobs"
log=$(mktemp)
DATABASE_URL="postgresql://postgres@127.0.0.1:$port/jq_bench_dash" "$jqctl" dashboard --listen 127.0.0.1:0 >"$log" 2>&1 &
dash_pid=$!
for _ in $(seq 100); do grep -q '^dashboard: ' "$log" && break; sleep 0.1; done
base=$(sed -n 's/^dashboard: //p' "$log" | head -1)
base=${base%/}
job=$("${psql[@]}" -d jq_bench_dash -Atc "SELECT max(id) FROM jq.jobs WHERE queue = 'bench.d' AND state = 'dead'")
mid=$("${psql[@]}" -d jq_bench_dash -Atc "SELECT id FROM jq.jobs WHERE queue = 'bench.a' AND state = 'ready' ORDER BY priority DESC, run_at, id OFFSET 100000 LIMIT 1")
pages=("/" "/queues/bench.a" "/queues/bench.a?after=$mid" "/queues/bench.a?state=completed"
       "/queues/bench.d?state=dead" "/queues/bench.d?state=dead&error=failure%203"
       "/queues/bench.d?state=scheduled" "/jobs/$job" "/schedules" "/workers" "/?fragment=1")
printf '%-48s %10s %10s %10s\n' page median_ms p95_ms max_ms
for p in "${pages[@]}"; do
    times=()
    for _ in $(seq "$requests"); do
        head=$(curl -s -o /dev/null -D - "$base$p" | tr -d '\r')
        # Only successful pages count: an error page is fast and would flatter the figures.
        # (A test on the first line without a pipe: with pipefail, grep -q ending first made
        # echo's SIGPIPE fail a 200 response.)
        status=${head%%$'\n'*}
        [[ $status == *" 200"* ]] || { echo "$p: $status" >&2; exit 1; }
        t=$(echo "$head" | sed -n 's/^server-timing: app;dur=//Ip')
        times+=("$t")
    done
    printf '%s\n' "${times[@]}" | sort -n | awk -v page="$p" '
        { v[NR] = $1 }
        END { m = v[int((NR + 1) / 2)]; p95 = v[int(NR * 0.95 + 0.999)]; printf "%-48s %10.1f %10.1f %10.1f\n", page, m, p95, v[NR] }'
done
