#!/usr/bin/env bash
# The main job: a private PostgreSQL cluster with jq preloaded, real jobs flowing through
# `jqctl work` workers.
#
# Installs what is missing, builds and installs jq and jqctl (release), starts a private
# cluster (data and socket in /tmp/jq-main-PORT, port 24400, shared_preload_libraries=jq),
# creates three queues and, when this jq has cron (jq.schedule), a schedule firing a report
# job every minute. Generates files and enqueues one checksum job per file with `jqctl enqueue`.
# Several `jqctl work` processes run worker-client/main-job-task.sh per job: hash the file,
# enqueue a compress job for it (idempotency key), gzip it. Two jobs name files that do not
# exist: they fail, back off and end up dead after 3 attempts. Shows `jqctl stats` while it
# runs, stops the workers with SIGTERM (graceful), prints the final `jqctl stats`, then stops
# the cluster. Safe to run again.
#
# Usage: worker-client/main-job.sh [JOBS] [WORKERS]    (defaults: 2000 jobs, 3 workers of 4 slots)
# Environment: PG_CONFIG (the PostgreSQL installation to install jq into and run; default the
# system PostgreSQL 15), JQ_MAIN_PORT (24400), JQ_MAIN_DATA (/tmp/jq-main-PORT), JQ_MAIN_DASHBOARD
# (an address, e.g. 127.0.0.1:8080: run `jqctl dashboard` there while the jobs run).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${1:-2000}
workers=${2:-3}
port=${JQ_MAIN_PORT:-24400}
run=$root/.jq-run
# The cluster's data directory lives under /tmp: Postgres runs as the postgres user, which
# may not be allowed into a clone under a private home directory.
data=${JQ_MAIN_DATA:-/tmp/jq-main-$port}
files=$run/files
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

# .ci/setup prepares the system PostgreSQL 15 and points cargo-pgrx at it (cargo pgrx init
# uses PG_CONFIG): keep a PG_CONFIG given for this script away from it.
env -u PG_CONFIG bash .ci/setup
mkdir -p "$run"
echo "== building and installing jq into $("$PG_CONFIG" --sharedir) (release)"
tools/install --release --pg-config "$PG_CONFIG" >"$run/install.log" 2>&1 \
    || { tail -40 "$run/install.log"; exit 1; }
echo "== building jqctl (release)"
cargo build --release -q -p worker-client --bin jqctl 2>"$run/build.log" || { tail -40 "$run/build.log"; exit 1; }
export JQCTL=$root/target/release/jqctl

export JQ_PG_BIN=$("$PG_CONFIG" --bindir)
source pg_test/cluster.sh
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    jq_cluster_stop "$data"
}
jq_cluster_stop "$data" || true
trap cleanup EXIT
echo "== starting a private cluster in $data (port $port, shared_preload_libraries=jq)"
jq_cluster_start "$data" "$port" shared_preload_libraries=jq

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=jq_main
export PGOPTIONS="-c client_min_messages=warning"
unset DATABASE_URL
psql_() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
psql_ -d postgres -c "DROP DATABASE IF EXISTS jq_main" -c "CREATE DATABASE jq_main"
psql_ -c "CREATE EXTENSION jq"

echo "== queues: checksum (3 attempts, 1 s fixed backoff), compress, reports"
"$JQCTL" create-queue checksum --max-attempts 3 --lease 30s --backoff fixed --backoff-base 1s --jitter none
"$JQCTL" create-queue compress --lease 30s
"$JQCTL" create-queue reports --lease 30s --max-attempts 2

# Least privilege (docs/security.md): the workers log in as jq_main_worker, which may claim from
# the three queues and enqueue to compress (the checksum handler does), and nothing else.
if [ "$(psql_ -At -c "SELECT count(*) FROM pg_proc WHERE pronamespace = 'jq'::regnamespace AND proname = 'grant'")" != 0 ]; then
    echo "== least privilege: workers log in as jq_main_worker (work on the three queues, enqueue to compress)"
    psql_ -c "DROP ROLE IF EXISTS jq_main_worker" -c "CREATE ROLE jq_main_worker LOGIN" \
          -c "SELECT jq.grant(q, 'jq_main_worker', 'work') FROM unnest(ARRAY['reports', 'compress', 'checksum']) q" \
          -c "SELECT jq.grant('compress', 'jq_main_worker', 'enqueue')" >/dev/null
    worker_user=jq_main_worker
else
    worker_user=postgres
fi

if [ "$(psql_ -At -c "SELECT count(*) FROM pg_proc WHERE pronamespace = 'jq'::regnamespace AND proname = 'schedule'")" != 0 ]; then
    echo "== cron: a report of $files every minute"
    "$JQCTL" schedule files-report '* * * * *' reports --payload "{\"dir\":\"$files\"}"
    "$JQCTL" schedules
else
    echo "== cron: skipped (this jq has no jq.schedule yet)"
fi

echo "== generating $jobs files and enqueueing one checksum job per file, plus 2 jobs for missing files (they fail and go dead)"
rm -rf "$files"; mkdir -p "$files"
for i in $(seq 1 "$jobs"); do
    head -c $(( (i * 7919) % 65536 + 1024 )) /dev/urandom > "$files/f$i.bin"
done
# Two jobs name files that do not exist: they fail, retry after 1 s, and go dead after 3 attempts.
{
    for i in $(seq 1 "$jobs"); do printf '{"path":"%s"}\n' "$files/f$i.bin"; done
    printf '{"path":"%s"}\n{"path":"%s"}\n' "$files/missing-1.bin" "$files/missing-2.bin"
} | "$JQCTL" enqueue checksum

# Maintenance (promoting retries, reaping expired leases, pruning) is jq.tick(): the background
# worker runs it when this jq has one; otherwise a loop here calls it.
sleep 1
if [ "$(psql_ -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type ILIKE '%jq%'")" = 0 ]; then
    echo "== maintenance: no jq background worker; calling jq.tick() every 0.5 s"
    ( while :; do psql_ -At -c "SELECT jq.tick()" >/dev/null 2>&1 || true; sleep 0.5; done ) & pids+=($!)
else
    echo "== maintenance: jq's background worker"
fi

if [ -n "${JQ_MAIN_DASHBOARD:-}" ]; then
    # The operator web UI on this cluster while the jobs run (docs/dashboard.md).
    "$JQCTL" -q dashboard --listen "$JQ_MAIN_DASHBOARD" >"$run/dashboard.out" 2>"$run/dashboard.log" &
    pids+=($!)
    for _ in $(seq 50); do grep -q '^dashboard: ' "$run/dashboard.out" && break; sleep 0.1; done
    echo "== $(head -1 "$run/dashboard.out")  (jqctl dashboard; stops with the cluster)"
fi

# Queues are claimed in the order given (earlier ones first): the rare cron reports first, so
# they do not wait for the checksum backlog; compress before checksum, so finished files leave.
echo "== running $workers workers: jqctl work --queue reports --queue compress --queue checksum -c 4 -- main-job-task.sh"
worker_pids=()
rm -f "$run"/worker-*.log
for w in $(seq 1 "$workers"); do
    PGUSER=$worker_user "$JQCTL" -q work --worker "main-$w" --queue reports --queue compress --queue checksum -c 4 \
        -- "$root/worker-client/main-job-task.sh" 2>"$run/worker-$w.log" &
    worker_pids+=($!); pids+=($!)
done

start=$(date +%s)
while :; do
    sleep 5
    left=$(psql_ -At -c "SELECT coalesce(sum(depth + running), 0) FROM jq.queue_stats WHERE queue IN ('checksum', 'compress')")
    echo "-- after $(( $(date +%s) - start )) s: $left checksum/compress jobs left"
    "$JQCTL" stats
    [ "$left" = 0 ] && break
done
if [ "${worker_user:-}" ] && [ "$(psql_ -At -c "SELECT count(*) FROM jq.schedules")" != 0 ]; then
    # The drain can end before the first minute boundary: wait for the first cron report (fired
    # by the background worker, worked by the same workers) so that every run shows one.
    echo "-- waiting up to 75 s for the first cron report (fired at a minute boundary)"
    for _ in $(seq 1 75); do
        [ "$(psql_ -At -c "SELECT count(*) FROM jq.jobs WHERE queue = 'reports' AND state = 'completed'")" != 0 ] && break
        sleep 1
    done
    echo "-- cron reports completed: $(psql_ -At -c "SELECT count(*) FROM jq.jobs WHERE queue = 'reports' AND state = 'completed'")"
fi

echo "== stopping the workers (SIGTERM: finish or release running jobs)"
kill -TERM "${worker_pids[@]}"
for p in "${worker_pids[@]}"; do wait "$p" || echo "worker $p exited with status $?"; done
tail -q -n1 "$run"/worker-*.log

echo "== final jqctl stats (the two dead jobs name missing files: 3 failed attempts each)"
"$JQCTL" stats
echo "== executions by outcome (one row per claim; failed = attempts of the two missing files)"
psql_ -c "SELECT queue, outcome, count(*) FROM jq.executions GROUP BY 1, 2 ORDER BY 1, 2"
echo "== dead jobs"
"$JQCTL" jobs --queue checksum --state dead --wide
echo "== to look around later: (export JQ_PG_BIN=$("$PG_CONFIG" --bindir); source pg_test/cluster.sh && jq_cluster_start $data $port shared_preload_libraries=jq)"
echo "== dashboard: then DATABASE_URL=postgresql://postgres@127.0.0.1:$port/jq_main $JQCTL dashboard  ->  http://127.0.0.1:8080/"
echo "== done; stopping the cluster (data stays in $data; generated files in $files)"
