#!/usr/bin/env bash
# jq's worker client through PgBouncer in transaction mode (Debian's 1.18, statements sent
# unprepared: JQ_STATEMENT_MODE=unprepared) beside the same client straight to PostgreSQL (the
# default, prepared statements), in the same run: interleaved rounds, the order swapped every
# round, a fresh prefill per cell. Each cell is `jq-bench client` (one worker, concurrency 10,
# claim batch 1 or 10, handlers that return at once): completed jobs per second over SECS after
# WARM. A third path, direct with unprepared statements, separates what the statement mode costs
# from what the pooler's hop costs. Prints every cell, then per batch the median jobs/s of each
# path and the median of its same-round ratios to direct.
#
#   PORT=24329 bench/experiments/pooler.sh          # a running cluster with jq, e.g. pg_test/run's
#
# Settings: PORT (the cluster, 127.0.0.1, user postgres; jq from PG_CONFIG's installation, a
# release build), BOUNCER_PORT (default PORT + 9),
# ROUNDS (3), SECS (5), WARM (2), PREFILL (100000 jobs per cell). Needs `pgbouncer` (apt) and a
# release build of bench/driver (`cargo build --release -p jq-bench`, done here). Creates the
# database jq_pooler_bench (dropped first) and starts pgbouncer as postgres in
# /tmp/jq-pooler-bench-BOUNCER_PORT; stops it at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
PORT=${PORT:-24329}; BOUNCER_PORT=${BOUNCER_PORT:-$((PORT + 9))}
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-5}; WARM=${WARM:-2}; PREFILL=${PREFILL:-100000}
DB=jq_pooler_bench
dir=/tmp/jq-pooler-bench-$BOUNCER_PORT
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres "$@"; }

# A debug jq.so (left by pg_test/run) distorts the figures: refused, unless ALLOW_DEBUG_JQ=1
# (then only the same-run ratios mean anything, and only roughly).
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
source bench/release_build.sh
[ "${ALLOW_DEBUG_JQ:-0}" = 1 ] || require_release_jq "$PG_CONFIG"
cargo build --release -p jq-bench >/dev/null 2>&1 || cargo build --release -p jq-bench
driver=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/jq-bench

psql_ -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
psql_ -d $DB -c "CREATE EXTENSION jq" -c "SELECT jq.create_queue('q')" >/dev/null

stop_bouncer() { [ -f "$dir/pgbouncer.pid" ] && kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true; }
stop_bouncer; rm -rf "$dir"; mkdir -p "$dir"
cat >"$dir/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$PORT
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 100
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
echo '"postgres" ""' >"$dir/userlist.txt"
chown -R postgres:postgres "$dir"
(cd / && runuser -u postgres -- pgbouncer -d "$dir/pgbouncer.ini")
trap stop_bouncer EXIT

direct=postgresql://postgres@127.0.0.1:$PORT/$DB
pooled=postgresql://postgres@127.0.0.1:$BOUNCER_PORT/$DB
out=$(mktemp)
cell() {  # round, path (direct|pooler), batch
    psql_ -d $DB -c "DELETE FROM jq.jobs WHERE queue = 'q'" >/dev/null
    psql_ -d $DB -c "SELECT count(*) FROM jq.enqueue_many('q', (SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, $PREFILL)))" >/dev/null
    psql_ -d $DB -c "VACUUM ANALYZE jq.jobs" >/dev/null
    local url=$direct mode=prepared
    if [ "$2" = pooler ]; then url=$pooled; mode=unprepared; fi
    if [ "$2" = direct-unprepared ]; then mode=unprepared; fi
    local json
    json=$(JQ_STATEMENT_MODE=$mode "$driver" client "$url" q 1 10 "$3" "$WARM" "$SECS")
    local rate
    rate=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["ok"]; print(d["jobs_per_s"])' "$json")
    echo "$1 $2 $3 $rate" | tee -a "$out"
}
echo "round path batch jobs_per_s"
for r in $(seq 1 "$ROUNDS"); do
    for b in 1 10; do
        if [ $((r % 2)) = 1 ]; then cell "$r" direct "$b"; cell "$r" direct-unprepared "$b"; cell "$r" pooler "$b"
        else cell "$r" pooler "$b"; cell "$r" direct-unprepared "$b"; cell "$r" direct "$b"; fi
    done
done
python3 - "$out" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for b in ("1", "10"):
    cells = {path: {r: float(x) for r, pp, bb, x in rows if bb == b and pp == path}
             for path in ("direct", "direct-unprepared", "pooler")}
    d = cells["direct"]
    med = {path: statistics.median(v.values()) for path, v in cells.items()}
    ratio = {path: statistics.median([v[r] / d[r] for r in d if r in v]) for path, v in cells.items()}
    print(f"batch {b}: direct {med['direct']:.0f} jobs/s; direct, unprepared {med['direct-unprepared']:.0f} "
          f"({ratio['direct-unprepared']:.2f}x); pooler, unprepared {med['pooler']:.0f} ({ratio['pooler']:.2f}x; target >= 0.8)")
EOF
psql_ -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
