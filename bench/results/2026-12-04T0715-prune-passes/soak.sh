#!/bin/bash
cd /work/main
export JQ_PG_BIN=/usr/lib/postgresql/15/bin
source pg_test/cluster.sh
set +eu
D=/tmp/pf/nap; P=55603
jq_cluster_stop $D >/dev/null 2>&1; rm -rf $D
jq_cluster_start $D $P shared_buffers=2GB max_wal_size=8GB fsync=on full_page_writes=on synchronous_commit=off shared_preload_libraries=jq jq.databases=jq max_connections=200 autovacuum_naptime=${NAP:-10s} >/dev/null
p() { $JQ_PG_BIN/psql -X -q -h 127.0.0.1 -p $P -U postgres "$@"; }
p -d postgres -c "CREATE DATABASE jq"
p -d jq -c "CREATE EXTENSION jq" -c "SELECT jq.create_queue('steady', retention => '1 minute', history_retention => '1 minute')" >/dev/null
sleep 2
target/bench/release/jq-bench soak "postgresql://postgres@127.0.0.1:$P/jq" steady 0 ${JOBS:-3000000} 16 ${CSV:-/tmp/pf/nap.csv}
jq_cluster_stop $D >/dev/null 2>&1
