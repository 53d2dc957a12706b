#!/usr/bin/env bash
# Experiment: many long-polling consumers at saturation. Producers keep DEPTH jobs ready
# (jq.enqueue_many, 10 jobs per call) while 16, then 64, consumers long-poll jq.claim(n => 10,
# wait => 1 s) + jq.complete_many (`jq-bench saturate`, bench/driver/src/saturate.rs); rounds
# interleave the two cells on one private cluster, each cell on an emptied jq.jobs, and the
# script prints each cell's JSON line, then the median completion rates and the ratio 64/16
# (the goal: at least 0.8).
#
# Usage: bench/experiments/many_consumers.sh [ROUNDS] [SECS] [DEPTH]   (defaults 3, 15, 4000)
#   PRODUCERS [4]: the driver's producer connections. CONSUMERS="16 64" (the cells of a round; the ratio is last / first). PER_JOB=1 also runs,
#   interleaved, each cell with the wakeups of before waiters registered their n (each job
#   woke a waiter: jq._claim_wait_start replaced to register a batch of 1). WAITS=1 also samples
#   pg_stat_activity's wait events of jq's backends every 100 ms during each cell and prints
#   the most frequent (a profile of where the backends wait, not of where they compute).
#   jq must be installed into PG_CONFIG's PostgreSQL (tools/install --release); the driver is
#   built with cargo into target/release. JQ_BENCH_PORT [24475], JQ_BENCH_DATA [/tmp/jq-bench-many].
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}; secs=${2:-15}; depth=${3:-4000}; cells=${CONSUMERS:-16 64}
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config || echo /usr/lib/postgresql/15/bin/pg_config)}
export JQ_PG_BIN=$("$PG_CONFIG" --bindir)
D=${JQ_BENCH_DATA:-/tmp/jq-bench-many}; P=${JQ_BENCH_PORT:-24475}
cargo build -q --release -p jq-bench
bin=target/release/jq-bench
source pg_test/cluster.sh
jq_cluster_stop "$D" || true; rm -rf "$D"
trap 'jq_cluster_stop "$D"' EXIT
# track_functions = pl: the driver reads the looks (jq._claim_batch) and sleeps (jq._claim_sleep)
# per job from pg_stat_user_functions.
jq_cluster_start "$D" "$P" shared_buffers=1GB max_wal_size=8GB synchronous_commit=off \
    shared_preload_libraries=jq jq.databases=jq track_functions=pl max_connections=200
export PGOPTIONS="-c client_min_messages=warning"
q() { "$JQ_PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$P" -U postgres -d jq "$@"; }
"$JQ_PG_BIN/psql" -X -q -h 127.0.0.1 -p "$P" -U postgres -d postgres -c "CREATE DATABASE jq"
q -c "CREATE EXTENSION jq" -c "SELECT jq.create_queue('q')" >/dev/null
url="postgresql://postgres@127.0.0.1:$P/jq"

waits() {  # samples wait events until the file $1 exists
    while [ ! -e "$1" ]; do
        q -c "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
              WHERE datname = 'jq' AND state = 'active' AND pid <> pg_backend_pid()
                AND query NOT LIKE '%pg_stat_activity%'" || true
        sleep 0.1
    done
}
fixed_def=$(q -c "SELECT pg_get_functiondef('jq._claim_wait_start(text,interval,integer)'::regprocedure)")
per_job_def=${fixed_def//"CASE WHEN v_limited THEN 1 ELSE _claim_wait_start.n END"/1}
[ "$per_job_def" != "$fixed_def" ] || { echo "many_consumers.sh: the per-job variant no longer applies" >&2; exit 1; }
variants="fixed"; [ "${PER_JOB:-0}" = 1 ] && variants="fixed per_job"
cpu_ticks() {  # every 0.5 s until the file $1 exists: "sample pid ticks" (utime + stime) of each server process
    local pm k=0; pm=$(head -n 1 "$D/postmaster.pid")
    while [ ! -e "$1" ]; do
        for p in $pm $(pgrep -P "$pm"); do
            awk -v k=$k -v p="$p" '{ print k, p, $14 + $15 }' "/proc/$p/stat" 2>/dev/null || true
        done
        k=$((k + 1)); sleep 0.5
    done
}
# The server's CPU per job completed, over the whole cell (warm-up included): the processes of
# the first sample count from that sample, later ones (the cell's connections) from zero.
cpu_per_job() {  # ticks file, jobs
    python3 - "$1" "$2" "$(getconf CLK_TCK)" <<'PY'
import sys
first, last = {}, {}
for line in open(sys.argv[1]):
    k, p, t = line.split()
    if k == "0":
        first[p] = int(t)
    last[p] = int(t)
ticks = sum(t - first.get(p, 0) for p, t in last.items())
print(f"{1000.0 * ticks / int(sys.argv[3]) / max(int(sys.argv[2]), 1):.3f}")
PY
}
declare -A rate cpu
for r in $(seq 1 "$rounds"); do
    for c in $cells; do
    for v in $variants; do
        if [ "$v" = per_job ]; then q -c "$per_job_def" >/dev/null; else q -c "$fixed_def" >/dev/null; fi
        q -c "TRUNCATE jq.jobs, jq.execution_log" -c "VACUUM ANALYZE jq.jobs" -c "CHECKPOINT" >/dev/null
        if [ "${WAITS:-0}" = 1 ]; then
            stopf=$(mktemp -u); waits "$stopf" >"$stopf.samples" &
        fi
        cpuf=$(mktemp -u); cpu_ticks "$cpuf" >"$cpuf.ticks" &
        line=$("$bin" saturate "$url" q "$depth" "$c" "$secs" "${PRODUCERS:-4}")
        touch "$cpuf"; wait $!
        jobs_done=$(q -c "SELECT count(*) FROM jq.jobs WHERE state = 'completed'")
        cpu_ms=$(cpu_per_job "$cpuf.ticks" "$jobs_done")
        echo "round $r consumers $c $v: $line server CPU ms/job $cpu_ms"
        cpu[$c$v]="${cpu[$c$v]:-} $cpu_ms"
        rm -f "$cpuf" "$cpuf.ticks"
        if [ "${WAITS:-0}" = 1 ]; then
            touch "$stopf"; wait
            echo "  wait events (samples of active backends): $(sort "$stopf.samples" | uniq -c | sort -rn | head -8 | awk '{printf "%s %s; ", $2, $1}')"
            rm -f "$stopf" "$stopf.samples"
        fi
        rate[$c$v]="${rate[$c$v]:-} $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["completed_per_s"])' "$line")"
    done
    done
done
q -c "$fixed_def" >/dev/null
first=${cells%% *}; last=${cells##* }
for v in $variants; do
python3 - "$v" "$first" "${rate[$first$v]}" "$last" "${rate[$last$v]}" "${cpu[$first$v]}" "${cpu[$last$v]}" <<'PY'
import statistics, sys
v, a, ra, b, rb = sys.argv[1], sys.argv[2], list(map(float, sys.argv[3].split())), sys.argv[4], list(map(float, sys.argv[5].split()))
ca, cb = list(map(float, sys.argv[6].split())), list(map(float, sys.argv[7].split()))
ratios = [y / x for x, y in zip(ra, rb)]
print(f"{v}: {a} consumers median {statistics.median(ra):.0f} jobs/s, {b} consumers median {statistics.median(rb):.0f} jobs/s; "
      f"{b}/{a} per round median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}); "
      f"server CPU per job median {statistics.median(ca):.3f} / {statistics.median(cb):.3f} ms")
PY
done
