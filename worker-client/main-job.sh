#!/usr/bin/env bash
# The main job, for now: a private PostgreSQL cluster with jq, real jobs flowing through SQL.
#
# Installs what is missing, builds and installs jq (release), starts a private cluster (data
# and socket in /tmp/jq-main-54400, port 54400), creates two queues, generates files and enqueues one
# job per file, then runs several workers that claim batches with jq.claim, do real local work
# (SHA-256 of the file, then gzip it) and report with jq.complete_many or jq.fail. A few jobs
# point at files that do not exist: they fail, back off and end up dead after max_attempts. A
# maintenance loop calls jq.tick() (the background worker replaces it in a later issue). Prints
# progress and the final jq.queue_stats, then stops the cluster. Safe to run again.
#
# Usage: worker-client/main-job.sh [JOBS] [WORKERS]    (defaults: 2000 jobs, 4 workers)
# The worker-client issue replaces these shell workers with `jqctl work`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${1:-2000}
workers=${2:-4}
port=${JQ_MAIN_PORT:-54400}
run=$root/.jq-run
# The cluster's data directory lives under /tmp: Postgres runs as the postgres user, which
# may not be allowed into a clone under a private home directory.
data=${JQ_MAIN_DATA:-/tmp/jq-main-$port}
files=$run/files

bash .ci/setup
mkdir -p "$run"
echo "== building and installing jq (release)"
cargo pgrx install --release --pg-config "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" >"$run/install.log" 2>&1 \
    || { tail -40 "$run/install.log"; exit 1; }

source pg_test/cluster.sh
mkdir -p "$run"
jq_cluster_stop "$data" || true
trap 'jq_cluster_stop "$data"' EXIT
echo "== starting a private cluster in $data (port $port)"
jq_cluster_start "$data" "$port"

export PGOPTIONS="-c client_min_messages=warning"
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d jq_main "$@"; }
psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "DROP DATABASE IF EXISTS jq_main" -c "CREATE DATABASE jq_main"
echo "== creating the extension and two queues: checksum (3 attempts, 1 s fixed backoff) and compress"
psql_ -At >/dev/null <<'SQL'
CREATE EXTENSION jq;
SELECT jq.create_queue('checksum', max_attempts => 3, lease => '30 seconds',
                       backoff => 'fixed', backoff_base => '1 second', jitter => 'none');
SELECT jq.create_queue('compress', lease => '30 seconds');
SQL

echo "== generating $jobs files and enqueueing one checksum job per file"
rm -rf "$files"; mkdir -p "$files"
for i in $(seq 1 "$jobs"); do
    head -c $(( (i * 7919) % 65536 + 1024 )) /dev/urandom > "$files/f$i.bin"
done
# Two jobs name files that do not exist: they fail, retry after 1 s, and go dead after 3 attempts.
{
    printf '['
    for i in $(seq 1 "$jobs"); do printf '{"path":"%s"},' "$files/f$i.bin"; done
    printf '{"path":"%s"},{"path":"%s"}]' "$files/missing-1.bin" "$files/missing-2.bin"
} > "$run/payloads.json"
psql_ -v payloads="$(cat "$run/payloads.json")" <<'SQL'
SELECT count(*) AS enqueued FROM jq.enqueue_many('checksum', :'payloads'::jsonb);
SQL

# A worker: claim up to 20 jobs, checksum each file, enqueue a compress job for it and complete
# the batch in one transaction; failures are reported one by one with jq.fail.
worker() {
    local name=$1 queue=$2 batch
    while :; do
        batch=$(psql_ -At -F '|' -c "SELECT id, lease_token, payload->>'path' FROM jq.claim('$queue', '$name', 20)") \
            || { echo "$name: claim failed; retrying" >&2; sleep 1; continue; }
        if [ -z "$batch" ]; then
            [ -f "$run/stop" ] && return 0
            sleep 0.2; continue
        fi
        local ids=() tokens=() results=() sql=""
        while IFS='|' read -r id token path; do
            if [ "$queue" = checksum ]; then
                if sum=$(sha256sum "$path" 2>/dev/null); then
                    ids+=("$id"); tokens+=("$token"); results+=("{\"sha256\":\"${sum%% *}\"}")
                    sql+="SELECT jq.enqueue('compress', jsonb_build_object('path', '$path'));"
                else
                    sql+="SELECT jq.fail($id, '$token', 'cannot read $path');"
                fi
            else
                if gzip -kf "$path" 2>/dev/null; then
                    ids+=("$id"); tokens+=("$token"); results+=("{\"bytes\":$(stat -c %s "$path.gz")}")
                else
                    sql+="SELECT jq.fail($id, '$token', 'gzip failed for $path');"
                fi
            fi
        done <<< "$batch"
        if [ ${#ids[@]} -gt 0 ]; then
            local a_ids a_tokens a_results
            a_ids=$(IFS=,; echo "${ids[*]}"); a_tokens=$(IFS=,; echo "${tokens[*]}")
            a_results=$(printf "'%s'::jsonb," "${results[@]}"); a_results=${a_results%,}
            sql+="SELECT count(*) FROM jq.complete_many('{$a_ids}'::bigint[], '{$a_tokens}'::uuid[], ARRAY[$a_results]);"
        fi
        psql_ -At -c "BEGIN; $sql COMMIT;" >/dev/null \
            || echo "$name: reporting a batch failed; its jobs come back when their leases expire" >&2
    done
}

maintenance() {
    while [ ! -f "$run/stop" ]; do psql_ -At -c "SELECT jq.tick()" >/dev/null; sleep 0.5; done
}

rm -f "$run/stop"
echo "== running $workers checksum workers and $workers compress workers"
pids=()
for w in $(seq 1 "$workers"); do
    worker "checksum-$w" checksum & pids+=($!)
    worker "compress-$w" compress & pids+=($!)
done
maintenance & pids+=($!)

start=$(date +%s)
while :; do
    sleep 1
    line=$(psql_ -At -F ' ' -c "SELECT string_agg(format('%s: %s claimable, %s scheduled, %s running, %s completed, %s dead', queue, claimable, scheduled, running, completed, dead), ' | ' ORDER BY queue) FROM jq.queue_stats")
    echo "[$(( $(date +%s) - start ))s] $line"
    left=$(psql_ -At -c "SELECT coalesce(sum(depth + running), 0) FROM jq.queue_stats")
    [ "$left" = 0 ] && break
done
touch "$run/stop"
wait "${pids[@]}"

echo "== final jq.queue_stats (the two dead jobs name missing files: 3 failed attempts each)"
psql_ -c "SELECT queue, depth, claimable, scheduled, running, completed, dead FROM jq.queue_stats ORDER BY queue"
echo "== executions by outcome (one row per claim; failed = attempts of the two missing files)"
psql_ -c "SELECT outcome, count(*) FROM jq.executions GROUP BY outcome ORDER BY outcome"
echo "== dead jobs"
psql_ -c "SELECT id, attempt, last_error FROM jq.jobs WHERE state = 'dead' ORDER BY id"
echo "== done; stopping the cluster (data stays in $data; generated files in $files)"
