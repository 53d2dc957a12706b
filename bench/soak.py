"""Held-snapshot soak for bench/run (psycopg 3, bench/.venv).

Usage: soak.py URL SYSTEM CLEAN HELD AFTER OUTDIR [control] -- PGBENCH_CMD...     SYSTEM: jq | floor
Runs the drain PGBENCH_CMD (its -T must cover CLEAN + HELD + AFTER) and counts the completion log
(bench_done) every second. After CLEAN seconds a separate session opens a REPEATABLE READ
transaction and takes its snapshot (vacuum can then remove nothing newer), holds it HELD seconds,
commits, and the drain goes on AFTER seconds. Writes OUTDIR/soak-SYSTEM.csv (second, jobs done
that second, phase, every 5 s dead tuples, sizes, checkpoints, WAL and the table's vacuum) and OUTDIR/soak-SYSTEM-explain.txt: the
claim's plan with EXPLAIN (ANALYZE, BUFFERS) shortly before the snapshot, near its end and near
the end of AFTER (for jq through auto_explain with log_nested_statements, in a transaction rolled
back), with the vacuums in progress then. Prints one JSON
line: clean rate (seconds 3..CLEAN), rate during the snapshot (mean, slowest 10 s, last 30 s),
rate in seconds 20-30 after it, their ratios, and the first second after the snapshot from which the 3-s mean is >= 0.8x clean.
"""
import json
import statistics
import subprocess
import sys
import time

import psycopg

url, system, clean, held, after, outdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
cmd = sys.argv[sys.argv.index("--") + 1:]
# "control" before "--": the same drain for the same time, but no snapshot is taken (what the
# drain's own ageing does to its rate over CLEAN + HELD + AFTER seconds).
control = "control" in sys.argv[7:sys.argv.index("--")]
table = "jq.jobs" if system == "jq" else "floor_jobs"
CLAIM = {"jq": "SELECT * FROM jq.claim('q', 'explain', 10)",
         "floor": "WITH c AS (SELECT id FROM floor_jobs WHERE queue = 'q' AND state = 'ready' ORDER BY priority DESC, run_at, id "
                  "LIMIT 10 FOR UPDATE SKIP LOCKED) UPDATE floor_jobs j SET state = 'running', attempt = j.attempt + 1, "
                  "worker = 'w', lease_token = gen_random_uuid(), lease_expires_at = now() + interval '5 minutes' "
                  "FROM c WHERE j.id = c.id RETURNING j.id"}[system]
explain_out = []


def explain(label):
    with psycopg.connect(url, autocommit=True) as e:
        notes = []
        e.add_notice_handler(lambda d: notes.append(d.message_primary))
        e.execute("SET client_min_messages = log")
        if system == "jq":
            for s in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0", "SET auto_explain.log_analyze = on",
                      "SET auto_explain.log_buffers = on", "SET auto_explain.log_nested_statements = on",
                      "SET auto_explain.log_level = notice"):
                e.execute(s)
        e.execute("BEGIN")
        if system == "jq":
            e.execute(CLAIM).fetchall()
            text = "\n\n".join(notes)
        else:
            text = "\n".join(r[0] for r in e.execute("EXPLAIN (ANALYZE, BUFFERS) " + CLAIM).fetchall())
        e.execute("ROLLBACK")
    explain_out.append(f"=== {label} ===\n{text}\n")


def health(c):
    # Every 5 s: the table's dead and live tuples, autovacuums and sizes; the cluster's
    # checkpoints so far, its WAL position (MB) and the buffers backends had to write themselves;
    # the vacuum of the table in progress (phase and heap blocks scanned / total), if any.
    return c.execute(
        f"SELECT n_dead_tup, n_live_tup, autovacuum_count, pg_total_relation_size('{table}'), pg_indexes_size('{table}'), "
        f"(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter), "
        f"(pg_current_wal_lsn() - '0/0'::pg_lsn) / 1048576, (SELECT buffers_backend FROM pg_stat_bgwriter), "
        f"(SELECT coalesce(max(phase || ' ' || heap_blks_scanned || '/' || heap_blks_total), '') FROM pg_stat_progress_vacuum "
        f"WHERE relid = '{table}'::regclass) "
        f"FROM pg_stat_user_tables WHERE relid = '{table}'::regclass").fetchone()


with psycopg.connect(url, autocommit=True) as c:
    done = lambda: c.execute("SELECT count(*) FROM bench_done").fetchone()[0]
    rows, h0 = [], health(c)
    pg = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    snap = psycopg.connect(url)
    t0, last = time.monotonic(), done()
    total = clean + held + after
    for sec in range(1, total + 1):
        if sec == clean - 2:
            explain("clean, 2 s before the snapshot")
        if sec == clean and not control:
            snap.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            snap.execute("SELECT count(*) FROM bench_done").fetchone()  # takes the snapshot
        if sec == clean + held - 3:
            explain(f"snapshot held for {held - 3} s")
        if sec == clean + held and not control:
            snap.commit()
        if sec == total - 3:
            explain(f"{after - 3} s after the snapshot's end")
            av = c.execute("SELECT coalesce(string_agg(relid::regclass || ' ' || phase || ' ' || heap_blks_scanned || '/' || heap_blks_total, '; '), 'none') "
                           "FROM pg_stat_progress_vacuum").fetchone()[0]
            st = c.execute(f"SELECT last_autovacuum, last_autoanalyze, n_dead_tup, n_mod_since_analyze FROM pg_stat_user_tables "
                           f"WHERE relid = '{table}'::regclass").fetchone()
            explain_out.append(f"vacuums in progress: {av}\n{table}: last_autovacuum {st[0]}, last_autoanalyze {st[1]}, "
                               f"n_dead_tup {st[2]}, n_mod_since_analyze {st[3]}\n")
        time.sleep(max(0.0, t0 + sec - time.monotonic()))
        now = done()
        phase = "clean" if sec <= clean else "held" if sec <= clean + held else "after"
        hl = health(c) if sec % 5 == 0 else ("",) * 9
        rows.append((sec, now - last, phase, *hl))
        last = now
    pg.wait()
    err = pg.stderr.read()
    snap.close()
    h1 = health(c)
with open(f"{outdir}/soak-{system}{'-control' if control else ''}.csv", "w") as f:
    f.write("second,jobs,phase,n_dead_tup,n_live_tup,autovacuum_count,total_bytes,index_bytes,checkpoints,wal_mb,buffers_backend,vacuum\n")
    for r in rows:
        f.write(",".join(str(x) for x in r) + "\n")
with open(f"{outdir}/soak-{system}{'-control' if control else ''}-explain.txt", "w") as f:
    f.write("\n".join(explain_out))
rate = lambda a, b: statistics.mean(r[1] for r in rows if a <= r[0] <= b)
c_rate = rate(3, clean)
d_rate = rate(clean + 1, clean + held)
a_rate = rate(clean + held + 20, clean + held + 30) if after >= 30 else rate(clean + held + 1, clean + held + after)
# "Stays >= 0.3x" is judged on the slowest 10 s of the hold, not its mean, which would hide a
# collapse late in the hold (how a queue whose claims walk dead index entries fails: slower as
# they pile up). Also the last 30 s of the hold.
held_secs = [r[1] for r in rows if clean + 1 <= r[0] <= clean + held]
min10 = min((statistics.mean(held_secs[i:i + 10]) for i in range(0, max(1, len(held_secs) - 9))), default=0)
last30 = statistics.mean(held_secs[-30:]) if held_secs else 0
back = None
for s in range(clean + held + 1, total - 1):
    if statistics.mean(r[1] for r in rows if s <= r[0] <= s + 2) >= 0.8 * c_rate:
        back = s - clean - held
        break
print(json.dumps({"system": system, "clean": round(c_rate), "held": round(d_rate), "after_20_30s": round(a_rate),
                  "held_ratio": round(d_rate / c_rate, 2), "after_ratio": round(a_rate / c_rate, 2),
                  "held_min10": round(min10), "held_last30": round(last30),
                  "back_to_0.8x_after_s": back, "held_s": held,
                  "dead_tuples_end_of_snapshot": max((r[3] for r in rows if r[2] == "held" and r[3] != ""), default=None),
                  "total_bytes_start": h0[3], "total_bytes_end": h1[3], "autovacuums": h1[2] - h0[2],
                  "pgbench_errors": "aborted" in err}))
