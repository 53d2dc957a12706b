#!/bin/bash
# sample PORT OUT: every 15 s until the soak driver ends
P=$1; OUT=$2; : > $OUT
sleep 5
while pgrep -f "jq-bench soak" >/dev/null; do
  timeout 10 psql -X -At -h 127.0.0.1 -p $P -U postgres -d jq -c "select now()::time(0), (select count(*) from jq.jobs where state='completed'), (select extract(epoch from now()-min(finished_at))::int from jq.jobs where state='completed'), pg_relation_size('jq.jobs')/1048576, pg_indexes_size('jq.jobs')/1048576, n_dead_tup, autovacuum_count, (select passes||' '||pruned||' '||round(pass_ms) from jq.status() limit 1) from pg_stat_user_tables where relname='jobs'" >> $OUT 2>&1
  sleep 15
done
