#!/usr/bin/env bash
# Private PostgreSQL 15 clusters for jq's tests, the main job and the benchmarks.
# Postgres refuses to run as root, so initdb and postgres run as the `postgres` user.
#
#   source pg_test/cluster.sh
#   jq_cluster_start DIR PORT [postgres -c settings...]   # initdb if needed, start, wait
#   jq_cluster_stop DIR
set -euo pipefail

JQ_PG_BIN=${JQ_PG_BIN:-/usr/lib/postgresql/15/bin}

jq_as_postgres() {
    # From / so that the postgres user is not left in a directory it may not enter.
    if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

jq_cluster_start() {
    local dir=$1 port=$2
    shift 2
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
    chmod 700 "$dir"
    if [ ! -f "$dir/PG_VERSION" ]; then
        jq_as_postgres "$JQ_PG_BIN/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 \
            --locale=C.UTF-8 >"$dir.initdb.log" 2>&1 || { cat "$dir.initdb.log"; return 1; }
    fi
    local opts="-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir"
    opts+=" -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    opts+=" -c shared_buffers=256MB -c max_prepared_transactions=10 -c log_min_messages=warning"
    local extra
    for extra in "$@"; do opts+=" -c $extra"; done
    # Default ports lie below Linux's ephemeral range (32768-60999). A port given inside it may
    # be held for a moment by a client connection of an earlier step ("Address already in use":
    # seen with bench/smoke right after the test suite): retry a few times before giving up.
    local try
    for try in 1 2 3 4 5 6 7 8 9 10; do
        if jq_as_postgres "$JQ_PG_BIN/pg_ctl" -D "$dir" -l "$dir/server.log" -o "$opts" -w -t 60 start >/dev/null; then
            return 0
        fi
        tail -n 5 "$dir/server.log" | grep -q "Address already in use" || return 1
        echo "jq_cluster_start: port $port is busy, retrying ($try)" >&2
        sleep 2
    done
    return 1
}

jq_cluster_stop() {
    local dir=$1
    [ -f "$dir/postmaster.pid" ] || return 0
    jq_as_postgres "$JQ_PG_BIN/pg_ctl" -D "$dir" -m fast -w -t 60 stop >/dev/null || true
}
