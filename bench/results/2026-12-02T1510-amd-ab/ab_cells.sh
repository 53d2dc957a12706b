#!/usr/bin/env bash
# usage: cells.sh "jq pgmq floor" conns batch secs rounds
set -uo pipefail
cd /work/main
B=/usr/lib/postgresql/15/bin; port=55430
p() { "$B/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $port -U postgres "$@"; }
export PGOPTIONS="-c client_min_messages=warning"
systems=$1; c=$2; b=$3; secs=${4:-8}; rounds=${5:-3}; n=${PREFILL:-200000}
suffix=$([ "$b" = 1 ] && echo "" || echo "_b$b")
for r in $(seq $rounds); do
for s in $systems; do
  case $s in
    floor|floorv) db=$s; sc=bench/floor_claim_complete$suffix.pgbench
      p -d $db -c "TRUNCATE floor_jobs, bench_done" -c "INSERT INTO floor_jobs (queue, state, payload) SELECT 'q', 'ready', '{\"n\":1}' FROM generate_series(1, $n)" >/dev/null;;
    jq|variant) db=$s; sc=bench/jq_claim_complete$suffix.pgbench
      p -d $db -c "TRUNCATE jq.jobs, jq.execution_log, bench_done" -c "SELECT count(*) FROM jq.enqueue_many('q', (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $n)))" >/dev/null;;
    pgmq) db=pgmq; sc=bench/pgmq_read_delete$suffix.pgbench
      p -d pgmq -c "TRUNCATE pgmq.q_q, bench_done" -c "SELECT count(*) FROM pgmq.send_batch('q', (SELECT array_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $n)))" >/dev/null;;
  esac
  p -d $db -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
  cpu0=$(awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat)
  d0=$(p -d $db -At -c "SELECT count(*) FROM bench_done")
  $B/pgbench -n -h 127.0.0.1 -p $port -U postgres -c $c -j $(( c<2?1:2 )) -T $secs -M prepared -f $sc $db >/dev/null 2>&1
  d1=$(p -d $db -At -c "SELECT count(*) FROM bench_done")
  cpu1=$(awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat)
  jobs=$((d1-d0))
  echo "r$r $s c$c b$b jobs/s=$((jobs/secs)) cpu_us/job=$(( (cpu1-cpu0)*10000/ (jobs>0?jobs:1) ))"
done; done
