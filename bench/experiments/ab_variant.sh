#!/usr/bin/env bash
# A/B of one change to jq's schema against jq as installed, with the raw-SQL floor alongside:
# three databases on one private cluster (bench/run's settings), cells interleaved round by
# round (floor, jq, variant), a drain through pgbench, jobs/s counted in the completion log, and
# WAL bytes per job (pg_current_wal_lsn around the measured seconds). A development aid for "does this change pay?" questions; bench/run is the benchmark.
#
#   bench/experiments/ab_variant.sh "ALTER TABLE jq.jobs ADD CONSTRAINT c CHECK (max_attempts BETWEEN 1 AND 1000000)"
#
# Environment: CONNS ["1 4 64"] BATCH [1; or 10, 100] ROUNDS [3] SECS [5] PREFILL [120000]
#   JQ_AB_PORT [25420] JQ_AB_DATA [/tmp/jq-ab]; PG_CONFIG as for bench/run (jq installed there).
# Used for the CHECK-constraint finding in docs/BENCHMARKS.md ("What was learned").
set -euo pipefail
cd "$(dirname "$0")/../.."
variant_sql=${1:?usage: bench/experiments/ab_variant.sh "SQL applied to the variant database"}
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config || echo /usr/lib/postgresql/15/bin/pg_config)}
export JQ_PG_BIN=$("$PG_CONFIG" --bindir)
source bench/release_build.sh; require_release_jq "$PG_CONFIG"
port=${JQ_AB_PORT:-25420}; data=${JQ_AB_DATA:-/tmp/jq-ab}; rounds=${ROUNDS:-3}; secs=${SECS:-5}; n=${PREFILL:-120000}
source pg_test/cluster.sh
jq_cluster_stop "$data" >/dev/null 2>&1 || true; rm -rf "$data"
trap 'jq_cluster_stop "$data" >/dev/null 2>&1' EXIT
jq_cluster_start "$data" "$port" shared_buffers=2GB max_wal_size=8GB fsync=on full_page_writes=on \
    synchronous_commit=off shared_preload_libraries=jq jq.databases=jq max_connections=200 >/dev/null
export PGOPTIONS="-c client_min_messages=warning"
p() { "$JQ_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@"; }
for d in floor jq variant; do p -d postgres -c "CREATE DATABASE $d"; done
p -d floor -f bench/pgbench/floor.sql >/dev/null
for d in jq variant; do p -d $d -c "CREATE EXTENSION jq" -c "SELECT jq.create_queue('q')" -f bench/pgbench/done_log.sql >/dev/null; done
p -d variant -c "$variant_sql"
suffix=$([ "${BATCH:-1}" = 1 ] && echo "" || echo "_b${BATCH}")
cell() {  # database, connections -> "jobs/s WAL-bytes/job"
    local db=$1 c=$2 s d0 d1 t0 t1 j w0 w1
    j=$(( c < 2 ? 1 : 2 ))
    if [ "$db" = floor ]; then
        s=floor_claim_complete$suffix.pgbench
        p -d floor -c "TRUNCATE floor_jobs, bench_done" \
            -c "INSERT INTO floor_jobs (queue, state, payload) SELECT 'q', 'ready', '{\"n\":1}' FROM generate_series(1, $n)" >/dev/null
    else
        s=jq_claim_complete$suffix.pgbench
        p -d "$db" -c "TRUNCATE jq.jobs, jq.execution_log, bench_done" \
            -c "SELECT count(*) FROM jq.enqueue_many('q', (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $n)))" >/dev/null
    fi
    p -d "$db" -c "VACUUM ANALYZE" -c CHECKPOINT
    "$JQ_PG_BIN/pgbench" -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -c "$c" -j "$j" -T 1 -f "bench/pgbench/$s" "$db" >/dev/null 2>&1 || true
    d0=$(p -d "$db" -Atc "SELECT count(*) FROM bench_done"); w0=$(p -d "$db" -Atc "SELECT pg_current_wal_lsn()"); t0=$(date +%s.%N)
    "$JQ_PG_BIN/pgbench" -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -c "$c" -j "$j" -T "$secs" -f "bench/pgbench/$s" "$db" >/dev/null 2>&1 || true
    t1=$(date +%s.%N); d1=$(p -d "$db" -Atc "SELECT count(*) FROM bench_done")
    w1=$(p -d "$db" -Atc "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0') / greatest($d1 - $d0, 1)")
    python3 -c "print(round(($d1 - $d0) / ($t1 - $t0)), round($w1))"
}
for c in ${CONNS:-1 4 64}; do
    for r in $(seq 1 "$rounds"); do
        f=$(cell floor "$c"); a=$(cell jq "$c"); b=$(cell variant "$c")
        python3 -c "import sys; f, fw, a, aw, b, bw = map(int, sys.argv[1:]); print(f'conns $c round $r: floor {f} jq {a} variant {b} jobs/s; jq/floor {a/f:.2f} variant/floor {b/f:.2f} variant/jq {b/a:.2f}; WAL B/job floor {fw} jq {aw} variant {bw}, jq/floor {aw/fw:.2f} variant/floor {bw/fw:.2f}')" $f $a $b
    done
done
