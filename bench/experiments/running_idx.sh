#!/usr/bin/env bash
# Experiment: is jobs_running_idx (chosen by the generic plans of jq.complete / complete_many
# when ANALYZE saw no running job) what makes jq's batch-10/100 and client cells slow? Runs jq's
# SQL-level drain (batch 10, 100) and the worker client with the index and with it dropped, 2
# rounds, on a private cluster. It drops an index jq needs (the reaper's): a measurement only.
# Usage: bench/experiments/running_idx.sh   (after bench/run has built bench/driver and installed jq
# into PG_CONFIG; JQ_BENCH_PORT [24461], JQ_BENCH_DATA [/tmp/jq-bench-exp])
set -euo pipefail
cd "$(dirname "$0")/../.."
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config || echo /usr/lib/postgresql/15/bin/pg_config)}
export JQ_PG_BIN=$("$PG_CONFIG" --bindir)
source pg_test/cluster.sh
D=${JQ_BENCH_DATA:-/tmp/jq-bench-exp}; P=${JQ_BENCH_PORT:-24461}
jq_cluster_stop $D || true; rm -rf $D
trap 'jq_cluster_stop $D' EXIT
jq_cluster_start $D $P shared_buffers=2GB max_wal_size=8GB fsync=on full_page_writes=on synchronous_commit=off shared_preload_libraries=jq jq.databases=jq
export PGOPTIONS="-c client_min_messages=warning"
q() { $JQ_PG_BIN/psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $P -U postgres -d jq "$@"; }
$JQ_PG_BIN/psql -X -q -h 127.0.0.1 -p $P -U postgres -d postgres -c "CREATE DATABASE jq"
q -c "CREATE EXTENSION jq" -f bench/pgbench/done_log.sql -c "SELECT jq.create_queue('q')" >/dev/null
prep() {
  q -c "TRUNCATE jq.jobs, jq.execution_log, bench_done" >/dev/null
  for i in 1 2 3 4; do q -c "SELECT count(*) FROM jq.enqueue_many('q', (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, 100000)))" >/dev/null; done
  q -c "VACUUM ANALYZE" -c "CHECKPOINT"
}
done_n() { q -c "SELECT count(*) FROM jq.jobs WHERE state = 'completed'"; }
for r in 1 2; do
  for variant in index noindex; do
    if [ $variant = noindex ]; then q -c "DROP INDEX IF EXISTS jq.jobs_running_idx"; else q -c "CREATE INDEX IF NOT EXISTS jobs_running_idx ON jq.jobs (lease_expires_at) WHERE state = 'running'"; fi
    for b in 10 100; do
      prep
      $JQ_PG_BIN/pgbench -n -h 127.0.0.1 -p $P -U postgres -M prepared -c 8 -j 2 -T 2 -f bench/pgbench/jq_claim_complete_b$b.pgbench jq >/dev/null 2>&1
      d0=$(done_n); $JQ_PG_BIN/pgbench -n -h 127.0.0.1 -p $P -U postgres -M prepared -c 8 -j 2 -T 6 -f bench/pgbench/jq_claim_complete_b$b.pgbench jq >/dev/null 2>&1; d1=$(done_n)
      echo "round $r $variant jq SQL batch $b: $(( (d1 - d0) / 6 )) jobs/s"
    done
    prep
    echo "round $r $variant jq-client batch 10: $(${CARGO_TARGET_DIR:-target/bench}/release/jq-bench client postgresql://postgres@127.0.0.1:$P/jq q 4 32 10 2 6)"
  done
done
