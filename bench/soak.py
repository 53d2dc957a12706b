"""Held-snapshot soak for bench/run (psycopg 3, bench/.venv).

Usage: soak.py URL SYSTEM CLEAN HELD AFTER OUTDIR [control] [round=N] -- PGBENCH_CMD...     SYSTEM: jq | floor
Runs the drain PGBENCH_CMD (its -T must cover CLEAN + HELD + AFTER; bench/run passes --progress=1)
and takes the jobs done each second from pgbench's progress lines (transactions per second, times the
jobs per transaction: the completion log's rows at the end over pgbench's transactions). It does
not count the completion log (bench_done) every second: a count(*) of a table that grows by the
drain rate is a parallel sequential scan of millions of rows each second by the end, which took
~0.5% of the machine's CPU in the clean seconds and 11-18% in the hold's middle and after it
(perf): a decline of the measured drain that the measurement itself made. After CLEAN seconds a separate session opens a REPEATABLE READ
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
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psycopg

url, system, clean, held, after, outdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
cmd = sys.argv[sys.argv.index("--") + 1:]
# "control" before "--": the same drain for the same time, but no snapshot is taken (what the
# drain's own ageing does to its rate over CLEAN + HELD + AFTER seconds).
control = "control" in sys.argv[7:sys.argv.index("--")]
# "round=N" before "--": the repetition (files of rounds after the first get "-rN")
rnd = next((int(a[6:]) for a in sys.argv[7:sys.argv.index("--")] if a.startswith("round=")), 1)
tag = f"{system}{'-control' if control else ''}{f'-r{rnd}' if rnd > 1 else ''}"
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


progress = []  # (arrival, pgbench's seconds since its start, transactions per second)
err_lines = []


def read_stderr(stream):
    # pgbench --progress=1 prints "progress: 12.0 s, 2398.4 tps, lat ..." to stderr every second
    for line in stream:
        m = re.match(r"progress: ([0-9.]+) s, ([0-9.]+) tps", line)
        if m:
            progress.append((time.monotonic(), float(m.group(1)), float(m.group(2))))
        else:
            err_lines.append(line)


with psycopg.connect(url, autocommit=True) as c:
    done = lambda: c.execute("SELECT count(*) FROM bench_done").fetchone()[0]  # at the start and the end only
    rows, h0, d_start = [], health(c), done()
    # stdout to a file: with both piped, communicate() would also read stderr and take progress
    # lines from the reader thread (seen: a control drain lost its last two, and its second 340
    # read 54 jobs).
    out_f = tempfile.TemporaryFile(mode="w+")
    pg = subprocess.Popen(cmd, stdout=out_f, stderr=subprocess.PIPE, text=True)
    reader = threading.Thread(target=read_stderr, args=(pg.stderr,), daemon=True)
    reader.start()
    snap = psycopg.connect(url)
    t0 = time.monotonic()
    total = clean + held + after
    # Row `sec` counts the jobs of second (sec - 1, sec]. What happens at a phase's boundary runs
    # right after the row of its last second, so that second CLEAN + 1 is the first one held and
    # CLEAN + HELD + 1 the first one after (not a second early, inside the previous phase's last
    # row). The claim's plans are taken outside the judged windows (second
    # 2, before the clean seconds 3..CLEAN; 3 s before the end of the hold; after the last row).
    for sec in range(1, total + 1):
        time.sleep(max(0.0, t0 + sec - time.monotonic()))
        phase = "clean" if sec <= clean else "held" if sec <= clean + held else "after"
        hl = health(c) if sec % 5 == 0 else ("",) * 9
        rows.append([sec, None, phase, *hl])
        if sec == 1:
            explain("clean, before the snapshot")
        if sec == clean and not control:
            snap.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            pid = snap.execute("SELECT pg_backend_pid()").fetchone()[0]  # takes the snapshot
            assert c.execute("SELECT backend_xmin IS NOT NULL FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0], \
                "the REPEATABLE READ session holds no snapshot"
        if sec == clean + held - 3:
            explain(f"snapshot held for {held - 3} s")
        if sec == clean + held and not control:
            snap.commit()
    explain(f"{after} s after the snapshot's end")
    av = c.execute("SELECT coalesce(string_agg(relid::regclass || ' ' || phase || ' ' || heap_blks_scanned || '/' || heap_blks_total, '; '), 'none') "
                   "FROM pg_stat_progress_vacuum").fetchone()[0]
    st = c.execute(f"SELECT last_autovacuum, last_autoanalyze, n_dead_tup, n_mod_since_analyze FROM pg_stat_user_tables "
                   f"WHERE relid = '{table}'::regclass").fetchone()
    explain_out.append(f"vacuums in progress: {av}\n{table}: last_autovacuum {st[0]}, last_autoanalyze {st[1]}, "
                       f"n_dead_tup {st[2]}, n_mod_since_analyze {st[3]}\n")
    pg.wait()
    reader.join()
    out_f.seek(0)
    out = out_f.read()
    err = "".join(err_lines)
    snap.close()
    h1, d_end = health(c), done()
    ready_left = c.execute(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE state = 'ready')").fetchone()[0]
# Jobs per pgbench transaction: 10 while the queue is deep (each script claims and completes a
# batch of 10); fewer means claims came back short (the queue ran dry), reported below.
m = re.search(r"number of transactions actually processed: (\d+)", out)
tx_total = int(m.group(1)) if m else 0
jobs_per_tx = (d_end - d_start) / tx_total if tx_total else 0.0
# pgbench's clock against this script's: progress line i covers pgbench seconds (t[i-1], t[i]]
# and arrives right after t[i]; the median lag maps pgbench's seconds onto ours.
offset = statistics.median(a - t0 - x for a, x, _ in progress) if progress else 0.0
cum = [(offset, 0.0)]
for i, (_, x, tps) in enumerate(progress):
    prev = progress[i - 1][1] if i else 0.0
    cum.append((offset + x, cum[-1][1] + tps * (x - prev)))


def cum_at(t):  # transactions done by our second t (linear between progress lines)
    if t <= cum[0][0]:
        return 0.0
    for (ta, ca), (tb, cb) in zip(cum, cum[1:]):
        if t <= tb:
            return ca + (cb - ca) * (t - ta) / (tb - ta) if tb > ta else cb
    return cum[-1][1]


for r in rows:
    r[1] = round((cum_at(r[0]) - cum_at(r[0] - 1)) * jobs_per_tx)
with open(f"{outdir}/soak-{tag}.csv", "w") as f:
    f.write("second,jobs,phase,n_dead_tup,n_live_tup,autovacuum_count,total_bytes,index_bytes,checkpoints,wal_mb,buffers_backend,vacuum\n")
    for r in rows:
        f.write(",".join(str(x) for x in r) + "\n")
with open(f"{outdir}/soak-{tag}-explain.txt", "w") as f:
    f.write("\n".join(explain_out))
rate = lambda a, b: statistics.mean(r[1] for r in rows if a <= r[0] <= b)
c_rate = rate(3, clean)
d_rate = rate(clean + 1, clean + held)
# seconds 20-30 after the snapshot's end: rows CLEAN + HELD + 21 .. CLEAN + HELD + 30
a_rate = rate(clean + held + 21, clean + held + 30) if after >= 30 else rate(clean + held + 1, clean + held + after)
# "Stays >= 0.3x" is judged on the slowest 10 s of the hold, not its mean, which would hide a
# collapse late in the hold (how a queue whose claims walk dead index entries fails: slower as
# they pile up). Also the last 30 s of the hold.
held_secs = [r[1] for r in rows if clean + 1 <= r[0] <= clean + held]
min10 = min((statistics.mean(held_secs[i:i + 10]) for i in range(0, max(1, len(held_secs) - 9))), default=0)
last30 = statistics.mean(held_secs[-30:]) if held_secs else 0
# Not a measurement (summarize.py reads "not measured"): pgbench aborted (the empty claim of a
# queue run dry ends its script), its progress does not cover every second, claims came back
# short of 10 jobs (the per-second rates assume 10 per transaction), or no ready job was left.
void = ("pgbench aborted" if "aborted" in err
        else f"pgbench printed {len(progress)} progress lines, the last at {progress[-1][1] if progress else 0} s, for {total} s"
        if len(progress) < total or progress[-1][1] < total - 0.5
        else f"claims came back short: {jobs_per_tx:.3f} jobs per transaction, not 10" if abs(jobs_per_tx - 10) > 0.0005
        else "the queue ran dry" if not ready_left
        else "no clean rate" if c_rate <= 0
        else None)
c_rate = c_rate or 1.0  # void anyway; keeps the ratios below from dividing by zero
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
                  "pgbench_errors": "aborted" in err, "jobs_per_tx": round(jobs_per_tx, 3),
                  "progress_lines": len(progress), "void": void}))
