#!/usr/bin/env bash
# Experiment (the pgmq batch-100 drain cells): what does keeping a record of each execution
# cost against pgmq's read + delete, with jq out of the picture? Raw SQL only, batch 100, the
# claim of the floor (bench/pgbench/floor_claim_complete_b100.pgbench) and four completions:
#   floor        UPDATE state = 'completed': the job row is the record (jq's layout; the floor
#                of bench/pgbench/floor.sql)
#   del-log      DELETE the job, INSERT the deleted row into an unindexed log table (the
#                cheapest separate record: no index, so it cannot even be looked up by id)
#   del-logpk    the same with a primary key on the log (the record found by job id)
#   del          DELETE the job, no record at all (pgmq's contract)
#   pgmq         pgmq 1.1.4 read + delete (bench/pgbench/pgmq_read_delete_b100.pgbench)
# Interleaved rounds, fresh prefill per cell (PREFILL jobs), synchronous_commit=off; jobs/s
# from the completion log (bench_done) over SECS seconds after a 2 s warm-up, at each of CONNS.
# Needs bench/.peers/pgmq/pgmq.sql (bench/run fetches it). No jq needed.
#   ROUNDS [3] SECS [6] CONNS ["1 4"] PREFILL [400000] JQ_BENCH_PORT [24462]
set -euo pipefail
cd "$(dirname "$0")/../.."
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config || echo /usr/lib/postgresql/15/bin/pg_config)}
export JQ_PG_BIN=$("$PG_CONFIG" --bindir)
source pg_test/cluster.sh
D=${JQ_BENCH_DATA:-/tmp/jq-bench-hist}; P=${JQ_BENCH_PORT:-24462}
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-6}; CONNS=${CONNS:-1 4}; PREFILL=${PREFILL:-400000}
jq_cluster_stop $D || true; rm -rf $D
trap 'jq_cluster_stop $D' EXIT
jq_cluster_start $D $P shared_buffers=2GB max_wal_size=8GB fsync=on full_page_writes=on synchronous_commit=off
export PGOPTIONS="-c client_min_messages=warning"
q() { local db=$1; shift; $JQ_PG_BIN/psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $P -U postgres -d $db "$@"; }
cells="floor del-log del-logpk del pgmq"
for c in $cells; do q postgres -c "CREATE DATABASE \"$c\""; done
for c in floor del-log del-logpk del; do q $c -f bench/pgbench/floor.sql -c "CREATE TABLE floor_log (LIKE floor_jobs)"; done
q del-logpk -c "ALTER TABLE floor_log ADD PRIMARY KEY (id)"
q pgmq -f bench/.peers/pgmq/pgmq.sql -c "SELECT pgmq.create('q')" -f bench/pgbench/done_log.sql >/dev/null
S=$(mktemp -d)
head -6 bench/pgbench/floor_claim_complete_b100.pgbench > $S/claim
cp bench/pgbench/floor_claim_complete_b100.pgbench $S/floor
{ cat $S/claim; cat <<'EOF'
WITH d AS (DELETE FROM floor_jobs f USING unnest(:ids::bigint[], :tokens::uuid[]) AS t(id, token)
           WHERE f.id = t.id AND f.lease_token = t.token AND f.state = 'running' RETURNING f.*),
     l AS (INSERT INTO floor_log SELECT id, queue, 'completed', priority, run_at, attempt, worker, lease_token, lease_expires_at, payload FROM d)
INSERT INTO bench_done SELECT id FROM d;
EOF
} > $S/del-log
cp $S/del-log $S/del-logpk
{ cat $S/claim; cat <<'EOF'
WITH d AS (DELETE FROM floor_jobs f USING unnest(:ids::bigint[], :tokens::uuid[]) AS t(id, token)
           WHERE f.id = t.id AND f.lease_token = t.token AND f.state = 'running' RETURNING f.id)
INSERT INTO bench_done SELECT id FROM d;
EOF
} > $S/del
cp bench/pgbench/pgmq_read_delete_b100.pgbench $S/pgmq
prep() {
  if [ $1 = pgmq ]; then
    q pgmq -c "TRUNCATE pgmq.q_q, bench_done" -c "SELECT count(*) FROM pgmq.send_batch('q', (SELECT array_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $PREFILL)))" >/dev/null
  else
    q $1 -c "TRUNCATE floor_jobs, floor_log, bench_done" \
         -c "INSERT INTO floor_jobs (queue, state, payload) SELECT 'q', 'ready', '{\"n\":1}' FROM generate_series(1, $PREFILL)" >/dev/null
  fi
  q $1 -c "VACUUM ANALYZE" -c "CHECKPOINT"
}
for r in $(seq 1 $ROUNDS); do
  for n in $CONNS; do
    line="round $r c$n:"
    for c in $cells; do
      prep $c
      $JQ_PG_BIN/pgbench -n -h 127.0.0.1 -p $P -U postgres -M prepared -c $n -j $n -T 2 -f $S/$c $c > $S/out 2>&1 || { cat $S/out >&2; exit 1; }
      d0=$(q $c -c "SELECT count(*) FROM bench_done")
      $JQ_PG_BIN/pgbench -n -h 127.0.0.1 -p $P -U postgres -M prepared -c $n -j $n -T $SECS -f $S/$c $c > $S/out 2>&1 || { cat $S/out >&2; exit 1; }
      d1=$(q $c -c "SELECT count(*) FROM bench_done")
      line="$line $c $(( (d1 - d0) / SECS ))"
    done
    echo "$line"
  done
done
