#!/usr/bin/env bash
# Experiment behind the long-poll figures of CHANGELOG.md (Unreleased, Fixed): pickup latency at a
# fixed arrival rate with consumers that long-poll (`jq-bench latency`: each consumer loops
# jq.claim(q, w, n => 10, wait => '1 second') + jq.complete_many), first clean, then while another
# session of the same database holds a transaction id, idle in transaction (the MVCC horizon is
# pinned: no dead entry of jobs_claim_idx can be removed for the whole phase).
# Per phase: the driver's JSON (pickup p50/p99 from the enqueue's commit), the calls and mean time
# of jq.claim and of the claim statements inside it (pg_stat_statements, track = all), the
# database's CPU per job (utime + stime of the postmaster's children, live and reaped, from /proc)
# jq.jobs' dead tuples at the phase's end and the entries of jobs_claim_idx read per job. The
# held phase runs as two halves (one driver run each, the xid held across both), so that growth
# with the jobs finished since the horizon was pinned shows. A quick A/B: run it against two builds installed
# into two PostgreSQL copies (PG_CONFIG), one after the other, on the same machine.
# Usage: [PG_CONFIG=...] [RATE=800] [SECS=60] [CONSUMERS=32] bench/experiments/longpoll_pinned.sh
#   JQ_BENCH_PORT (default 24468), JQ_BENCH_DATA (default /tmp/jq-bench-exp-longpoll); the driver
#   is built into target/bench as bench/run does.
set -euo pipefail
cd "$(dirname "$0")/../.."
RATE=${RATE:-800}; SECS=${SECS:-60}; CONSUMERS=${CONSUMERS:-32}
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config || echo /usr/lib/postgresql/15/bin/pg_config)}
export JQ_PG_BIN=$("$PG_CONFIG" --bindir)
source pg_test/cluster.sh
D=${JQ_BENCH_DATA:-/tmp/jq-bench-exp-longpoll}; P=${JQ_BENCH_PORT:-24468}
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/bench} cargo build --release -q -p jq-bench
driver=${CARGO_TARGET_DIR:-target/bench}/release/jq-bench
jq_cluster_stop $D >/dev/null 2>&1 || true; rm -rf $D
trap 'jq_cluster_stop $D >/dev/null 2>&1' EXIT
jq_cluster_start $D $P shared_buffers=1GB max_wal_size=8GB fsync=on full_page_writes=on synchronous_commit=off \
    shared_preload_libraries=jq,pg_stat_statements pg_stat_statements.track=all jq.databases=jq >/dev/null
export PGOPTIONS="-c client_min_messages=warning"
q() { $JQ_PG_BIN/psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $P -U postgres -d jq "$@"; }
$JQ_PG_BIN/psql -X -q -h 127.0.0.1 -p $P -U postgres -d postgres -c "CREATE DATABASE jq"
q -c "CREATE EXTENSION jq" -c "CREATE EXTENSION pg_stat_statements" -c "SELECT jq.create_queue('q')" >/dev/null
hz=$(getconf CLK_TCK)
# CPU ticks of the cluster: the postmaster's reaped children plus its live ones.
ticks() {
    local pm; pm=$(head -1 $D/postmaster.pid)
    local t; t=$(awk '{print $16 + $17}' /proc/$pm/stat)
    for c in $(ps --ppid $pm -o pid=); do
        t=$((t + $(awk '{print $14 + $15}' /proc/$c/stat 2>/dev/null || echo 0)))
    done
    echo $t
}
# Entries of jobs_claim_idx read since the server started (all scans of it: claims, the full
# claims among them, and the long-poll's lock-free looks; pg_stat_user_indexes).
idx_reads() { q -c "SELECT pg_stat_get_tuples_returned('jq.jobs_claim_idx'::regclass)"; }
phase() {
    [ "${3:-}" = novacuum ] || q -c "VACUUM jq.jobs" >/dev/null
    q -c "SELECT pg_stat_statements_reset()" >/dev/null
    local t0 out t1 r0 r1
    t0=$(ticks); r0=$(idx_reads)
    out=$("$driver" latency "postgresql://postgres@127.0.0.1:$P/jq" q $RATE ${4:-$SECS} $CONSUMERS $D/samples.csv)
    t1=$(ticks); sleep 1.5; r1=$(idx_reads)
    local jobs; jobs=$(q -c "SELECT count(*) FROM jq.jobs WHERE state = 'completed'")
    local n=$((jobs - ${2:-0}))
    echo "== $1: $out"
    echo "   pickups over 100 ms: $(awk -F, '$1 > 100' $D/samples.csv | wc -l), over 500 ms: $(awk -F, '$1 > 500' $D/samples.csv | wc -l) of $(wc -l < $D/samples.csv)"
    echo "   db cpu: $(( (t1 - t0) * 1000000 / hz / n )) us/job over $n jobs; jq.jobs dead tuples: $(q -c "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'jq.jobs'::regclass"); jobs_claim_idx entries read per job: $(( (r1 - r0) / n ))"
    q -F ' ' -c "SELECT 'jq.claim', calls, round(mean_exec_time::numeric, 3) FROM pg_stat_statements WHERE toplevel AND query LIKE '%FROM jq.claim(%' ORDER BY calls DESC LIMIT 1" \
      -c "SELECT 'claim statements inside jq.claim: calls', sum(calls), 'mean ms', round((sum(total_exec_time) / sum(calls))::numeric, 3), 'ms per job', round((sum(total_exec_time) / $n)::numeric, 3) FROM pg_stat_statements WHERE NOT toplevel AND (query LIKE 'UPDATE jq.jobs j SET%state = %running%' OR query LIKE '%jq._claim_batch(%')" \
      | sed 's/^/   /'
    LAST_JOBS=$jobs
}
phase clean 0
# The pinned horizon: an xid held idle in transaction for the whole phase.
mkfifo $D/hold.fifo
$JQ_PG_BIN/psql -X -q -h 127.0.0.1 -p $P -U postgres -d jq < $D/hold.fifo >/dev/null &
hold=$!
exec 3> $D/hold.fifo
echo "BEGIN; SELECT txid_current();" >&3
sleep 1
echo "   holder: $(q -c "SELECT state, backend_xid IS NOT NULL FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_xid IS NOT NULL")"
# Two halves, the xid held across both: a claim whose cost grew with the jobs finished since
# the horizon was pinned reads more entries per job in the second.
phase "xid held, first half" $LAST_JOBS novacuum $((SECS / 2))
phase "xid held, second half" $LAST_JOBS novacuum $((SECS / 2))
echo "COMMIT;" >&3
exec 3>&-
wait $hold
