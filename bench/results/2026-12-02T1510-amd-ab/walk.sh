#!/usr/bin/env bash
# Per-job index tuples read and buffers touched in a batch-1 drain: jq vs floor at c1 and c64.
set -uo pipefail
cd /work/main
B=/usr/lib/postgresql/15/bin; port=55430
p() { "$B/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $port -U postgres "$@"; }
export PGOPTIONS="-c client_min_messages=warning"
for c in ${CONNS:-1 64}; do for s in floor variant; do
  if [ $s = floor ]; then sc=bench/floor_claim_complete.pgbench; tbl=floor_jobs; cidx=floor_claim_idx
    p -d floor -c "TRUNCATE floor_jobs, bench_done" -c "INSERT INTO floor_jobs (queue, state, payload) SELECT 'q', 'ready', '{\"n\":1}' FROM generate_series(1, 120000)" >/dev/null
  else sc=bench/jq_claim_complete.pgbench; tbl=jobs; cidx=jobs_claim_idx
    p -d $s -c "TRUNCATE jq.jobs, jq.execution_log, bench_done" -c "SELECT count(*) FROM jq.enqueue_many('q', (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, 120000)))" >/dev/null; fi
  p -d $s -c "VACUUM ANALYZE" -c CHECKPOINT -c "SELECT pg_stat_reset()" >/dev/null
  sleep 0.6
  $B/pgbench -n -h 127.0.0.1 -p $port -U postgres -c $c -j $(( c<2?1:2 )) -T 6 -M prepared -f $sc $s >/dev/null 2>&1
  sleep 0.6
  p -d $s -At -F' ' -c "SELECT '$s c$c', (SELECT count(*) FROM bench_done) AS jobs,
     (SELECT string_agg(indexrelname||'='||round(idx_tup_read::numeric/greatest((SELECT count(*) FROM bench_done),1),1)||'/'||round(idx_scan::numeric/greatest((SELECT count(*) FROM bench_done),1),2), ' ' ORDER BY indexrelname) FROM pg_stat_user_indexes WHERE relname='$tbl' AND idx_scan>0),
     (SELECT 'heap_hit/job='||round(heap_blks_hit::numeric/greatest((SELECT count(*) FROM bench_done),1),1)||' idx_hit/job='||round(idx_blks_hit::numeric/greatest((SELECT count(*) FROM bench_done),1),1) FROM pg_statio_user_tables WHERE relname='$tbl')"
done; done
