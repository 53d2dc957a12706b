#!/usr/bin/env python3
"""Flat under pressure: pickup latency, CPU, WAL, dead tuples and table sizes at a FIXED offered
load, in three phases: clean (PHASE_SECS) -> pressure (PRESSURE_SECS) -> recovery (PHASE_SECS)
(bench/README.md, "Under pressure"; docs/BENCHMARKS.md gives the method).

  bench/pressure/run.py                                   # every kind, jq, 120-s phases
  PHASE_SECS=30 KINDS="a b" SYSTEMS="jq awa" bench/pressure/run.py
  PHASE_SECS=120 PRESSURE_SECS=1800 KINDS="a b" bench/pressure/run.py    # 30-minute holds
  RESULTS=DIR PHASE_SECS=… PRESSURE_SECS=… KINDS=… SYSTEMS=… bench/pressure/run.py --summarize
      # summary.md and plots again from DIR's finished cells (cell-S-K.json, samples-S-K.csv)

Pressure kinds (KINDS, default "a b c"), applied from this script during the middle phase:
  a  one session holds an xid: `BEGIN; SELECT txid_current()`, then idle in transaction
  b  SCANNERS (4) sessions, each in ONE REPEATABLE READ transaction for the whole phase, scan
     every queue table of the system (`SELECT count(*)`) in a loop, SCAN_PAUSE (1) s apart; with
     SCAN_PARALLEL=0 (the default) each scan runs in its session's backend alone
     (max_parallel_workers_per_gather = 0), so the pressure's CPU is exactly its backends'; with 1
     a scan may start parallel workers, whose CPU the breakdown catches only in part
  c  oversupply: the load process's middle segment offers RATE x 1.5
For each system (SYSTEMS, default "jq"; "pgmq", "floor" and "awa" too) and kind: a fresh database, ONE load process
for the whole schedule `P:RATE,H:RATE2,P:RATE` with the contract
  LOAD URL QUEUE SCHEDULE CONSUMERS OUTCSV   (OUTCSV lines `t_s,pickup_ms` or `t_s,missing`;
                                             last stdout line {"enqueued":N,"completed":M,"missing":K})
jq, pgmq and the floor: `jq-bench pressure … SYSTEM` (bench/driver/src/pressure.rs, system.rs; pgmq
1.13 SQL-only from bench/peers/fetch_pgmq.sh, the floor from bench/pgbench/floor.sql); awa: bench/peers/awa_pressure.py run by
AWA_PYTHON [bench/.peers/awa-venv/bin/python], skipped with a message when either is absent.
Every SAMPLE_SECS (2) s: n_dead_tup and pg_total_relation_size of every table in the system's
schema, pg_current_wal_lsn(), the CPU of the cluster (postmaster and descendants, bench/cpu.py
tree), of the load process and of the pressure sessions' backends (left out of the database's CPU
per job: they are the pressure, not the queue's work), and the database's CPU by role (RoleCpu:
the queue's clients, autovacuum, jq's background workers, other; summary.md gives it per phase).

Environment: PG_CONFIG [pg_config on PATH], SKIP_INSTALL=1 (jq already installed, release build),
JQ_BENCH_PORT [24470], JQ_BENCH_DATA [/tmp/jq-bench-pressure], PHASE_SECS [120], PRESSURE_SECS
[PHASE_SECS] (when longer than PHASE_SECS, the summary also compares the pressure phase's first and
last PHASE_SECS: the claim's cost must not grow with the jobs finished since the pin), RATE [800],
CONSUMERS [32], SYSTEMS ["jq"], KINDS ["a b c"], SCANNERS [4], SCAN_PAUSE [1], SCAN_PARALLEL [0], SAMPLE_SECS [2],
WARM_SECS [2] (first seconds of the clean phase left out), FLOOR_MS [1] (latencies below it count
as FLOOR_MS in the ratios to clean: the measurement's resolution), RESULTS
[bench/results/pressure-<UTC date>-<commit>], AWA_PYTHON.
Writes RESULTS/: machine.txt, summary.md, per system and kind pickup-S-K.csv (the load's OUTCSV),
samples-S-K.csv, tables-S-K.csv, load-S-K.log, and pressure-K.png per kind.
"""
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PY = os.path.join(ROOT, "bench/.venv/bin/python")


def ensure_venv():
    """Runs this script in bench/.venv (psycopg, matplotlib), created as bench/run creates it."""
    try:
        import matplotlib  # noqa: F401
        import psycopg  # noqa: F401
        return
    except ImportError:
        pass
    if os.path.abspath(sys.executable) == VENV_PY:
        sys.exit("bench/.venv lacks psycopg or matplotlib")
    if not os.path.exists(VENV_PY) or subprocess.call([VENV_PY, "-c", "import psycopg, matplotlib"]) != 0:
        print("creating bench/.venv (matplotlib, psycopg)", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "venv", os.path.join(ROOT, "bench/.venv")])
        subprocess.check_call([VENV_PY, "-m", "pip", "install", "-q", "matplotlib", "psycopg[binary]==3.2.*"])
    os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])


ensure_venv()
import psycopg  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "bench"))
import cpu  # noqa: E402  (bench/cpu.py: tree() and stat())

env = os.environ.get
PG_CONFIG = env("PG_CONFIG") or shutil.which("pg_config") or "/usr/lib/postgresql/15/bin/pg_config"
PG_BIN = subprocess.check_output([PG_CONFIG, "--bindir"], text=True).strip()
PORT = int(env("JQ_BENCH_PORT", "24470"))
DATA = env("JQ_BENCH_DATA", "/tmp/jq-bench-pressure")
PHASE = float(env("PHASE_SECS", "120"))
HOLD = float(env("PRESSURE_SECS", str(PHASE)))
RATE = float(env("RATE", "800"))
CONSUMERS = int(env("CONSUMERS", "32"))
SYSTEM_NAMES = env("SYSTEMS", "jq").replace(",", " ").split()
KINDS = env("KINDS", "a b c").replace(",", " ").split()
SCANNERS = int(env("SCANNERS", "4"))
SCAN_PAUSE = float(env("SCAN_PAUSE", "1"))
SCAN_PARALLEL = env("SCAN_PARALLEL", "0") == "1"
SAMPLE = float(env("SAMPLE_SECS", "2"))
WARM = float(env("WARM_SECS", "2"))
# Latencies below FLOOR_MS count as FLOOR_MS in the ratios to clean: below the measurement's
# resolution (the commit lies inside the producer's enqueue call, p50 ~2.4 ms on 2 loaded cores,
# and a job claimed before its producer read the answer counts 0 ms), a ratio of two such
# figures is noise.
FLOOR_MS = float(env("FLOOR_MS", "1"))
AWA_PYTHON = env("AWA_PYTHON", os.path.join(ROOT, "bench/.peers/awa-venv/bin/python"))
GRACE = 10.0  # the load's contract: a job not picked up 10 s after the schedule is missing
KIND_NAME = {"a": "held xid", "b": f"{SCANNERS} RR scanners", "c": "1.5x oversupply"}
# The goals under a pinned horizon (kinds a and b): the pressure phase's ratio to clean at most.
# The hot tables' growth is a goal of holds up to 2 minutes only.
GOALS = [("p50", 1.5), ("p99", 2.0), ("cpu", 1.3)] + ([("hot growth", 1.5)] if HOLD <= 120 else [])
# A long hold: the last PHASE_SECS of the pressure phase ÷ its first PHASE_SECS, at most (the
# database CPU per job and the pickup p50 must not grow with the jobs finished since the pin;
# the allowance is the spread of repeated clean phases on this machine class).
LATE_GOALS = [("p50", 1.5), ("cpu", 1.15)]


def bounds(k):
    """Start and end (s since the schedule's start) of phase k: 0 clean, 1 pressure, 2 recovery."""
    return [(WARM, PHASE), (PHASE, PHASE + HOLD), (PHASE + HOLD, 2 * PHASE + HOLD)][k]


def url(db):
    return f"postgresql://postgres@127.0.0.1:{PORT}/{db}"


def jq_driver():
    target = env("CARGO_TARGET_DIR") or os.path.join(ROOT, "target/bench")
    return os.path.join(target, "release/jq-bench")


def driver_adapter(system, **kw):
    """An adapter whose load process is `jq-bench pressure … SYSTEM` (jq, pgmq, floor)."""
    return dict(kw, cmd=lambda u, sched, out: [jq_driver(), "pressure", u, "q", sched, str(CONSUMERS), out, system],
                missing=lambda: None if os.access(jq_driver(), os.X_OK) else f"{jq_driver()} not built")


def psql(*args):
    """A prepare command: psql on the system's database, stopping at the first error."""
    return lambda u: [os.path.join(PG_BIN, "psql"), "-q", "-X", "-v", "ON_ERROR_STOP=1", u, *args]


PGMQ_SQL = os.path.join(ROOT, "bench/.peers/pgmq/pgmq.sql")  # bench/peers/fetch_pgmq.sh writes it


# The system adapters: how to launch the load process (same contract for every system), which
# database, which schema's tables to sample, which tables the scanners of kind b read (None:
# every table of the schema that is not a partition), which are the hot tables (the live jobs;
# None: the whole schema), the SQL that creates the system in a fresh database, and the query
# that turns true once the load has enqueued its first job (the schedule's start); `prepare`, a
# command run after the setup SQL, before the clean state is taken (awa: its schema migration;
# pgmq: its SQL-only install script, then the queue).
SYSTEMS = {
    "jq": driver_adapter(
        "jq", db="jq", schema="jq", scan=["jq.jobs", "jq.execution_log"], hot=["jq.jobs"], prepare=None,
        setup=["CREATE EXTENSION jq", "CREATE EXTENSION pg_stat_statements", "SELECT jq.create_queue('q')"],
        started="SELECT EXISTS (SELECT FROM jq.jobs)",
    ),
    # A message is deleted as soon as it is read: the start is the queue's identity sequence
    # having been used, not a row a 20-ms poll could miss.
    "pgmq": driver_adapter(
        "pgmq", db="pgmq", schema="pgmq", scan=["pgmq.q_q", "pgmq.a_q"], hot=["pgmq.q_q"], setup=[],
        prepare=psql("-f", PGMQ_SQL, "-c", "SELECT pgmq.create('q')"),
        started="SELECT is_called FROM pgmq.q_q_msg_id_seq",
    ),
    # floor.sql's bench_done (the drain cells' completion log) stays empty here. The floor's
    # statements are the driver's prepared ones: under plan_cache_mode = auto each connection
    # froze, at its 6th claim, a generic plan built on the nearly empty table (a Seq Scan + Sort
    # of floor_jobs, which keeps its completed rows) until the first autoanalyze replanned it; in
    # a 20-s-phase run the clean phase's pickup p50 rose from 2 to 160 ms over 15 s, then fell
    # to 1.6 ms. Custom plans, as pgmq's (its functions build their SQL per call) and jq's (its
    # statements' generic plans are the index walks) have, are what a floor on a settled table
    # would run.
    "floor": driver_adapter(
        "floor", db="floor", schema="public", scan=["floor_jobs"], hot=["floor_jobs"],
        setup=["ALTER DATABASE floor SET plan_cache_mode = force_custom_plan"],
        prepare=psql("-f", os.path.join(ROOT, "bench/pgbench/floor.sql")),
        started="SELECT EXISTS (SELECT FROM floor_jobs)",
    ),
    "awa": dict(
        db="awa", schema="awa", scan=None, hot=None, setup=[],
        prepare=lambda u: [AWA_PYTHON, os.path.join(ROOT, "bench/peers/awa_pressure.py"), u, "--migrate-only"],
        started="SELECT EXISTS (SELECT FROM awa.jobs)",
        cmd=lambda u, sched, out: [AWA_PYTHON, os.path.join(ROOT, "bench/peers/awa_pressure.py"), u, "q", sched, str(CONSUMERS), out],
        missing=lambda: next((f"{p} is absent (bench/peers/awa_setup.sh creates the venv)" for p in
                              (os.path.join(ROOT, "bench/peers/awa_pressure.py"), AWA_PYTHON) if not os.path.exists(p)), None),
    ),
}


def log(msg):
    line = f"[{time.strftime('%H:%M:%S', time.gmtime())}] {msg}"
    print(line, file=sys.stderr, flush=True)
    with open(os.path.join(RESULTS, "run.log"), "a") as f:
        f.write(line + "\n")


def sh(script, **kw):
    """Runs bash with pg_test/cluster.sh sourced (postgres refuses root: it runs as postgres)."""
    e = dict(os.environ, JQ_PG_BIN=PG_BIN)
    return subprocess.run(["bash", "-c", f"source pg_test/cluster.sh; {script}"], cwd=ROOT, env=e, check=True, **kw)


def q(db, sql, args=None):
    with psycopg.connect(url(db), autocommit=True) as c:
        cur = c.execute(sql, args)
        return cur.fetchall() if cur.description else None


def start_cluster():
    """The same cluster as bench/run's (bench/run, "cluster"), jq's background worker serving `jq`."""
    sh(f"jq_cluster_stop {DATA} || true; rm -rf {DATA}; jq_cluster_start {DATA} {PORT} shared_buffers=2GB "
       "max_wal_size=8GB fsync=on full_page_writes=on synchronous_commit=off "
       "shared_preload_libraries=jq,pg_stat_statements jq.databases=jq max_worker_processes=16 max_connections=200")


def postmaster_pid():
    with open(os.path.join(DATA, "postmaster.pid")) as f:
        return int(f.readline())


def fresh_database(sysname):
    """Drops and creates the system's database, sets the system up in it, then VACUUM ANALYZE,
    CHECKPOINT and a wait (at most 30 s) until no autovacuum worker runs, as bench/run's cells."""
    s = SYSTEMS[sysname]
    q("postgres", f"DROP DATABASE IF EXISTS {s['db']} WITH (FORCE)")
    q("postgres", f"CREATE DATABASE {s['db']}")
    for stmt in s["setup"]:
        q(s["db"], stmt)
    if s["prepare"]:
        subprocess.run(s["prepare"](url(s["db"])), cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    q(s["db"], "VACUUM ANALYZE")
    q(s["db"], "CHECKPOINT")
    deadline = time.monotonic() + 30
    while q("postgres", "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'")[0][0] > 0:
        if time.monotonic() > deadline:
            log("WARNING: an autovacuum worker still ran after 30 s; starting the cell anyway")
            break
        time.sleep(0.5)


# --- sampling ----------------------------------------------------------------------------------

TABLES_SQL = """SELECT c.oid::regclass::text, coalesce(s.n_dead_tup, 0), pg_total_relation_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY 1"""


class PressureCpu:
    """CPU seconds of the pressure sessions' backends: the last reading of each (a backend that
    exits takes its CPU into the postmaster's cutime, so each session reads its own just before
    it closes)."""

    def __init__(self):
        self.last, self.lock = {}, threading.Lock()

    def add(self, pid):
        with self.lock:
            self.last[pid] = 0.0

    def pids(self):
        with self.lock:
            return list(self.last)

    def read(self, pid=None):
        with self.lock:
            for p in [pid] if pid else list(self.last):
                try:
                    self.last[p] = cpu.stat(p)[1] / cpu.HZ
                except (OSError, ValueError, IndexError):
                    pass
            return sum(self.last.values())


# The roles of the cluster's processes in the CPU breakdown (pg_stat_activity.backend_type):
# the queue's clients, autovacuum, jq's background workers, and the rest (checkpointer, WAL
# writer, ...). A parallel worker counts under its leader's role.
ROLES = ("client", "autovacuum", "jq_worker", "other")
ROLE_SQL = """SELECT a.pid, a.backend_start, a.backend_type, a.leader_pid, l.backend_type
FROM pg_stat_activity a LEFT JOIN pg_stat_activity l ON l.pid = a.leader_pid AND a.backend_type = 'parallel worker'"""


class RoleCpu:
    """CPU seconds of the cluster's processes by role, from pg_stat_activity and /proc at each
    sample: per process (pid and start) its last reading, summed per role. A process that lives
    less than SAMPLE_SECS may never be read, and one that exits loses its last seconds: what the
    roles miss of the postmaster's tree is the breakdown's "unattributed" remainder."""

    def __init__(self, pcpu):
        self.pcpu, self.last = pcpu, {}

    @staticmethod
    def role(btype, leader_type):
        btype = leader_type or btype
        if btype == "client backend":
            return "client"
        if btype.startswith("autovacuum"):
            return "autovacuum"
        return "jq_worker" if btype.startswith("jq") else "other"

    def read(self, c):
        pressure = set(self.pcpu.pids())
        for pid, start, btype, leader, leader_type in c.execute(ROLE_SQL).fetchall():
            if pid in pressure or (leader in pressure and btype == "parallel worker"):
                role = "pressure_parallel" if pid not in pressure else None
            else:
                role = self.role(btype or "", leader_type)
            if role is None:
                continue
            try:
                self.last[(pid, start)] = (role, cpu.stat(pid)[1] / cpu.HZ)
            except (OSError, ValueError, IndexError):
                pass
        out = dict.fromkeys(ROLES + ("pressure_parallel",), 0.0)
        for role, secs in self.last.values():
            out[role] += secs
        return out


def sampler(sysname, load_pid, pcpu, stop, rows, trows):
    """Every SAMPLE seconds until `stop`: one row of totals and one row per table."""
    s = SYSTEMS[sysname]
    pm = postmaster_pid()
    roles = RoleCpu(pcpu)
    with psycopg.connect(url(s["db"]), autocommit=True) as c:
        while True:
            t = time.monotonic()
            by_role = roles.read(c)
            tables = c.execute(TABLES_SQL, (s["schema"],)).fetchall()
            wal = c.execute("SELECT (pg_current_wal_lsn() - '0/0')::bigint").fetchone()[0]
            hot = [r for r in tables if s["hot"] is None or r[0] in s["hot"]]
            # A load process that has exited reads 0: keep its last reading.
            load_cpu = max(cpu.tree(load_pid), rows[-1]["load_cpu"] if rows else 0.0)
            rows.append(dict(t=t, wal=wal, db_cpu=cpu.tree(pm), load_cpu=load_cpu, pressure_cpu=pcpu.read(),
                             dead=sum(r[1] for r in tables), size=sum(r[2] for r in tables), hot=sum(r[2] for r in hot),
                             **{f"cpu_{r}": v for r, v in by_role.items()}))
            trows.extend((t, name, dead, size) for name, dead, size in tables)
            if stop.wait(max(0.0, SAMPLE - (time.monotonic() - t))):
                return


# --- pressure ----------------------------------------------------------------------------------

def hold_xid(db, pcpu, until):
    """Kind a: one session takes an xid and stays idle in transaction until `until`."""
    with psycopg.connect(url(db)) as c:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        pcpu.add(pid)
        c.execute("SELECT txid_current()")
        until.wait()
        pcpu.read(pid)
        c.rollback()


def scan_tables(db, tables, pcpu, until):
    """Kind b: one REPEATABLE READ transaction, held until `until`, scanning `tables` in a loop."""
    with psycopg.connect(url(db), autocommit=True) as c:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        pcpu.add(pid)
        if not SCAN_PARALLEL:
            c.execute("SET max_parallel_workers_per_gather = 0")
        c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        while not until.is_set():
            for t in tables:
                c.execute(f"SELECT count(*) FROM {t}").fetchone()
            until.wait(SCAN_PAUSE)
        pcpu.read(pid)
        c.execute("COMMIT")


def scan_list(sysname):
    s = SYSTEMS[sysname]
    if s["scan"] is not None:
        return s["scan"]
    return [r[0] for r in q(s["db"], "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                     "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1", (s["schema"],))]


def apply_pressure(kind, sysname, pcpu, until):
    """Starts the pressure sessions of `kind` (none for c); they end when `until` is set."""
    db = SYSTEMS[sysname]["db"]
    if kind == "a":
        targets = [(hold_xid, (db, pcpu, until))]
    elif kind == "b":
        tables = scan_list(sysname)
        targets = [(scan_tables, (db, tables, pcpu, until))] * SCANNERS
    else:
        targets = []
    threads = [threading.Thread(target=f, args=a, daemon=True) for f, a in targets]
    for th in threads:
        th.start()
    return threads


# --- one cell: a system under one kind of pressure -----------------------------------------------

def wait_started(sysname, proc):
    """The schedule's start on this clock: the first poll (every 20 ms) that sees a job."""
    db = SYSTEMS[sysname]["db"]
    with psycopg.connect(url(db), autocommit=True) as c:
        while proc.poll() is None:
            try:
                if c.execute(SYSTEMS[sysname]["started"]).fetchone()[0]:
                    return time.monotonic()
            except psycopg.errors.UndefinedTable:  # the load process has not created its schema yet
                pass
            time.sleep(0.02)
    raise RuntimeError(f"{sysname}: the load process exited (status {proc.returncode}) before enqueuing")


def run_cell(sysname, kind):
    tag = f"{sysname}-{kind}"
    fresh_database(sysname)
    rate2 = RATE * 1.5 if kind == "c" else RATE
    schedule = f"{PHASE:g}:{RATE:g},{HOLD:g}:{rate2:g},{PHASE:g}:{RATE:g}"
    out = os.path.join(RESULTS, f"pickup-{tag}.csv")
    cmd = SYSTEMS[sysname]["cmd"](url(SYSTEMS[sysname]["db"]), schedule, out)
    log(f"{tag}: {' '.join(cmd)}")
    logf = open(os.path.join(RESULTS, f"load-{tag}.log"), "w")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT)
    rows, trows, stop, pcpu = [], [], threading.Event(), PressureCpu()
    smp = threading.Thread(target=sampler, args=(sysname, proc.pid, pcpu, stop, rows, trows), daemon=True)
    smp.start()
    try:
        t0 = wait_started(sysname, proc)
        until, on, off = threading.Event(), None, None
        if kind in ("a", "b"):
            time.sleep(max(0.0, t0 + PHASE - time.monotonic()))
            on = time.monotonic() - t0
            threads = apply_pressure(kind, sysname, pcpu, until)
            time.sleep(max(0.0, t0 + PHASE + HOLD - time.monotonic()))
            until.set()
            for th in threads:
                th.join()
            off = time.monotonic() - t0
        rc = proc.wait(timeout=2 * PHASE + HOLD + GRACE + 120)
    finally:
        if proc.poll() is None:
            proc.kill()
        stop.set()
        smp.join()
        logf.close()
    result = last_json(os.path.join(RESULTS, f"load-{tag}.log"))
    if rc != 0 or result is None:
        raise RuntimeError(f"{tag}: the load process failed (status {rc}); see load-{tag}.log")
    write_samples(tag, rows, trows, t0)
    q("postgres", f"DROP DATABASE IF EXISTS {SYSTEMS[sysname]['db']} WITH (FORCE)")
    cell = dict(system=sysname, kind=kind, schedule=schedule, result=result, on=on, off=off)
    with open(os.path.join(RESULTS, f"cell-{tag}.json"), "w") as f:
        json.dump(cell, f)
    return dict(cell, samples=[dict(r, t=r["t"] - t0) for r in rows])


def load_cell(tag):
    """A finished cell from its files (cell-TAG.json, samples-TAG.csv), for --summarize."""
    with open(os.path.join(RESULTS, f"cell-{tag}.json")) as f:
        cell = json.load(f)
    keys = dict(SAMPLE_COLUMNS)
    with open(os.path.join(RESULTS, f"samples-{tag}.csv")) as f:
        cell["samples"] = [{keys[k]: float(v) for k, v in r.items() if k in keys} for r in csv.DictReader(f)]
    return cell


def last_json(path):
    lines = [ln for ln in open(path).read().splitlines() if ln.startswith("{")]
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None


# samples-S-K.csv: column and key of a sample row (cpu_*: the CPU breakdown by role, RoleCpu).
SAMPLE_COLUMNS = [("t_s", "t"), ("wal_bytes", "wal"), ("db_cpu_s", "db_cpu"), ("load_cpu_s", "load_cpu"),
                  ("pressure_cpu_s", "pressure_cpu"), ("dead_tuples", "dead"), ("tables_bytes", "size"), ("hot_bytes", "hot")] + \
    [(f"cpu_{r}_s", f"cpu_{r}") for r in ROLES + ("pressure_parallel",)]


def write_samples(tag, rows, trows, t0):
    with open(os.path.join(RESULTS, f"samples-{tag}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([col for col, _ in SAMPLE_COLUMNS])
        for r in rows:
            w.writerow([f"{r[k] - t0:.2f}" if k == "t" else r[k] if isinstance(r[k], int) else f"{r[k]:.2f}"
                        for _, k in SAMPLE_COLUMNS])
    with open(os.path.join(RESULTS, f"tables-{tag}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "table", "n_dead_tup", "total_bytes"])
        for t, name, dead, size in trows:
            w.writerow([f"{t - t0:.2f}", name, dead, size])


# --- figures per phase ---------------------------------------------------------------------------

def read_pickups(path):
    """The load's OUTCSV, on the schedule's clock: (t, pickup_ms) per picked-up job and the
    enqueue t of each missing one. The schedule's start on the load's clock is its first
    commit: the earliest t_s - pickup_ms over the picked-up jobs."""
    done, missing = [], []
    for line in open(path):
        a, _, b = line.strip().partition(",")
        try:
            t = float(a)
        except ValueError:  # a header line
            continue
        if b == "missing":
            missing.append(t)
        else:
            done.append((t, float(b)))
    start = min((t - ms / 1000 for t, ms in done), default=0.0)
    return [(t - start, ms) for t, ms in done], [t - start for t in missing]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def phase_figures(cell, done, missing, a, b):
    """Figures of one cell between a and b seconds after the schedule's start."""
    lat = [ms for t, ms in done if a <= t < b]
    smp = [s for s in cell["samples"] if a <= s["t"] <= b]
    f = dict(jobs_s=len(lat) / (b - a), p50=pct(lat, 50), p99=pct(lat, 99), missing=sum(a <= t < b for t in missing),
             dead=max((s["dead"] for s in smp), default=float("nan")), size0=float("nan"), size1=float("nan"),
             hot0=float("nan"), hot1=float("nan"), wal=float("nan"), cpu=float("nan"), load_cpu=float("nan"))
    if len(smp) >= 2:
        s0, s1 = smp[0], smp[-1]
        n = sum(s0["t"] <= t < s1["t"] for t, _ in done)
        f.update(size0=s0["size"], size1=s1["size"], hot0=s0["hot"], hot1=s1["hot"])
        if n:
            d = {k: s1.get(k, 0.0) - s0.get(k, 0.0) for k in s1}
            db = d["db_cpu"] - d["pressure_cpu"] - d.get("cpu_pressure_parallel", 0.0)
            f.update(wal=d["wal"] / n, cpu=1000 * db / n, load_cpu=1000 * d["load_cpu"] / n)
            if "cpu_client" in s1:
                f["roles"] = {r: 1000 * d[f"cpu_{r}"] / n for r in ROLES}
                f["roles"]["unattributed"] = 1000 * db / n - sum(f["roles"].values())
                f["roles"]["pressure parallel"] = 1000 * d["cpu_pressure_parallel"] / n
    return f


def mb(x):
    return f"{x / 1e6:.0f}" if x == x else "–"


def ratio(x, y):
    return x / y if y and y == y and x == x else float("nan")


def lat_ratio(x, y):
    return ratio(max(x, FLOOR_MS), max(y, FLOOR_MS))


def cell_table(cell, done, missing):
    names = ["clean", KIND_NAME[cell["kind"]], "recovery"]
    figs = [phase_figures(cell, done, missing, *bounds(k)) for k in range(3)]
    long_hold = cell["kind"] in ("a", "b") and HOLD > PHASE
    if long_hold:  # the pressure phase's first and last PHASE_SECS
        names[2:2] = [f"{KIND_NAME[cell['kind']]}, first {PHASE:g} s", f"{KIND_NAME[cell['kind']]}, last {PHASE:g} s"]
        figs[2:2] = [phase_figures(cell, done, missing, PHASE, 2 * PHASE),
                     phase_figures(cell, done, missing, HOLD, PHASE + HOLD)]
    out = ["| phase | jobs/s | pickup p50 / p99 ms | missing | dead tuples peak | tables MB start→end (hot) | WAL/job bytes | db CPU ms/job | load CPU ms/job | p50 / p99 ÷ clean |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    c = figs[0]
    for name, f in zip(names, figs):
        out.append(f"| {name} | {f['jobs_s']:.0f} | {f['p50']:.2f} / {f['p99']:.2f} | {f['missing']} | {f['dead']:,.0f} | "
                   f"{mb(f['size0'])}→{mb(f['size1'])} ({mb(f['hot0'])}→{mb(f['hot1'])}) | {f['wal']:,.0f} | {f['cpu']:.3f} | "
                   f"{f['load_cpu']:.3f} | {lat_ratio(f['p50'], c['p50']):.2f} / {lat_ratio(f['p99'], c['p99']):.2f} |")
    if all("roles" in f for f in figs):
        out.append("\ndb CPU ms/job by role (" + "; ".join(f"{name}: " + ", ".join(f"{r} {v:.3f}" for r, v in f["roles"].items())
                                                       for name, f in zip(names, figs)) + ").")
    if cell["kind"] in ("a", "b"):
        p = figs[1]
        got = {"p50": lat_ratio(p["p50"], c["p50"]), "p99": lat_ratio(p["p99"], c["p99"]), "cpu": ratio(p["cpu"], c["cpu"]),
               "hot growth": ratio(p["hot1"], p["hot0"])}
        checks = [f"{g} {got[g]:.2f}× (≤ {lim}×): {'met' if got[g] <= lim else 'missed'}" for g, lim in GOALS]
        out.append("\nGoals (pressure phase ÷ clean; hot growth: end ÷ start of the pressure phase): " + "; ".join(checks) + ".")
    if long_hold:
        first, last = figs[2], figs[3]
        got = {"p50": lat_ratio(last["p50"], first["p50"]), "cpu": ratio(last["cpu"], first["cpu"])}
        checks = [f"{g} {got[g]:.2f}× (≤ {lim}×): {'met' if got[g] <= lim else 'missed'}" for g, lim in LATE_GOALS]
        out.append(f"\nNo growth with the jobs finished since the pin (last ÷ first {PHASE:g} s of the pressure phase; "
                   f"hot tables {ratio(figs[1]['hot1'], figs[1]['hot0']):.2f}× over the whole hold, not a goal past 2 minutes): "
                   + "; ".join(checks) + ".")
    return out


def write_summary(cells, skipped):
    hold = f", pressure {HOLD:g} s" if HOLD != PHASE else ""
    md = [f"# Flat under pressure ({'quick run, ' if PHASE < 120 else ''}phases of {PHASE:g} s{hold}, {RATE:g} jobs/s offered, {CONSUMERS} consumers)",
          "", "Open-loop load at a fixed rate; pickup = from the enqueue's commit to the claim returning the job (jq: `jq.claim`; "
          "pgmq: `pgmq.read_with_poll`; floor: its claim UPDATE, which does not wait: 10 ms pause after an empty claim).",
          f"Clean phase without its first {WARM:g} s. db CPU: the cluster's processes without the pressure sessions' backends.",
          f"Ratios to clean count latencies below {FLOOR_MS:g} ms as {FLOOR_MS:g} ms (the measurement's resolution: see each load's line).",
          "Hot tables: " + "; ".join(f"{n}: {', '.join(SYSTEMS[n]['hot']) if SYSTEMS[n]['hot'] else 'every table of schema ' + SYSTEMS[n]['schema']}"
                                      for n in SYSTEM_NAMES) + ".", ""]
    md += [f"- {s}: skipped, {why}" for s, why in skipped]
    for cell in cells:
        done, missing = read_pickups(os.path.join(RESULTS, f"pickup-{cell['system']}-{cell['kind']}.csv"))
        md += ["", f"## {cell['system']}, {cell['kind']}: {KIND_NAME[cell['kind']]}", "",
               f"Schedule `{cell['schedule']}`; load process: {json.dumps(cell['result'])}"
               + (f"; pressure applied from {cell['on']:.1f} s to {cell['off']:.1f} s." if cell["on"] is not None else ".")]
        md += [f"Load: {ln}" for ln in open(os.path.join(RESULTS, f"load-{cell['system']}-{cell['kind']}.log")).read().splitlines()
               if not ln.startswith("{")][-3:] + [""]
        md += cell_table(cell, done, missing)
    with open(os.path.join(RESULTS, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")


# --- plots ---------------------------------------------------------------------------------------

def plot(kind, cells):
    """pressure-KIND.png: pickup p50/p99 per 5-s window, dead tuples and table sizes over time,
    every system of the run, the pressure phase shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"jq": "tab:blue", "awa": "tab:red", "pgmq": "tab:green", "floor": "tab:grey"}
    fig, axes = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    for cell in (c for c in cells if c["kind"] == kind):
        color = colors.get(cell["system"], "black")
        done, _ = read_pickups(os.path.join(RESULTS, f"pickup-{cell['system']}-{kind}.csv"))
        wins = sorted({int(t // 5) for t, _ in done})
        xs = [5 * w + 2.5 for w in wins]
        by = {w: [] for w in wins}
        for t, ms in done:
            by[int(t // 5)].append(ms)
        axes[0].plot(xs, [pct(by[w], 50) for w in wins], color=color, label=f"{cell['system']} p50")
        axes[0].plot(xs, [pct(by[w], 99) for w in wins], color=color, linestyle="--", label=f"{cell['system']} p99")
        ts = [s["t"] for s in cell["samples"]]
        axes[1].plot(ts, [s["dead"] for s in cell["samples"]], color=color, label=f"{cell['system']} dead tuples")
        axes[2].plot(ts, [s["size"] / 1e6 for s in cell["samples"]], color=color, label=f"{cell['system']} all tables")
        axes[2].plot(ts, [s["hot"] / 1e6 for s in cell["samples"]], color=color, linestyle=":", label=f"{cell['system']} hot tables")
    labels = [("pickup per 5-s window (ms)", "log"), ("dead tuples (sum of the schema's tables)", "linear"), ("size (MB)", "linear")]
    for ax, (ylabel, scale) in zip(axes, labels):
        ax.axvspan(PHASE, PHASE + HOLD, color="grey", alpha=0.15, label=KIND_NAME[kind])
        ax.set_yscale(scale)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title(f"clean → {KIND_NAME[kind]} → recovery, {RATE:g} jobs/s offered, {CONSUMERS} consumers")
    axes[2].set_xlabel("seconds since the schedule's start")
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, f"pressure-{kind}.png"), dpi=110)
    plt.close(fig)


# --- main ----------------------------------------------------------------------------------------

def prepare():
    """Fetches pgmq's SQL when pgmq is among the systems; installs jq (unless SKIP_INSTALL=1) when
    jq is; builds the driver when jq, pgmq or the floor is."""
    if "pgmq" in SYSTEM_NAMES:
        subprocess.run(["bench/peers/fetch_pgmq.sh"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    if "jq" in SYSTEM_NAMES:
        if env("SKIP_INSTALL") != "1":
            log(f"installing jq into {PG_CONFIG}'s PostgreSQL (release build)")
            with open(os.path.join(RESULTS, "install.log"), "w") as f:
                subprocess.run(["tools/install", "--release", "--pg-config", PG_CONFIG], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, check=True)
        subprocess.run(["bash", "-c", f'source bench/release_build.sh; require_release_jq "{PG_CONFIG}"'], cwd=ROOT, check=True)
    if not {"jq", "pgmq", "floor"} & set(SYSTEM_NAMES):
        return
    log("building bench/driver")
    e = dict(os.environ, CARGO_TARGET_DIR=env("CARGO_TARGET_DIR") or os.path.join(ROOT, "target/bench"))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "jq-bench"], cwd=ROOT, env=e, check=True)


def machine():
    lines = [f"date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}", f"commit: {COMMIT}",
             f"cores: {os.cpu_count()}   load average at start: {' '.join(open('/proc/loadavg').read().split()[:3])}",
             f"postgres: {q('postgres', 'SELECT version()')[0][0]}",
             "settings: " + q("postgres", "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings WHERE name IN "
                              "('shared_buffers','max_wal_size','synchronous_commit','fsync','full_page_writes','shared_preload_libraries',"
                              "'autovacuum_naptime','checkpoint_timeout')")[0][0],
             f"knobs: PHASE_SECS={PHASE:g} PRESSURE_SECS={HOLD:g} RATE={RATE:g} CONSUMERS={CONSUMERS} SYSTEMS={' '.join(SYSTEM_NAMES)} KINDS={' '.join(KINDS)} "
             f"SCANNERS={SCANNERS} SCAN_PAUSE={SCAN_PAUSE:g} SCAN_PARALLEL={int(SCAN_PARALLEL)} SAMPLE_SECS={SAMPLE:g} WARM_SECS={WARM:g} FLOOR_MS={FLOOR_MS:g}"]
    with open("/proc/cpuinfo") as f:
        lines.insert(2, "cpu: " + next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?"))
    with open(os.path.join(RESULTS, "machine.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def summarize_only():
    """--summarize: summary.md and the plots again from the files of the cells that finished
    (a run stopped early keeps its finished cells; the knobs must be the run's, see machine.txt)."""
    cells = []
    for kind in KINDS:
        for s in SYSTEM_NAMES:
            if os.path.exists(os.path.join(RESULTS, f"cell-{s}-{kind}.json")):
                cells.append(load_cell(f"{s}-{kind}"))
    write_summary(cells, [])
    for kind in {c["kind"] for c in cells}:
        plot(kind, cells)
    log(f"wrote {RESULTS}/summary.md from {len(cells)} cell(s)")


def main():
    if sys.argv[1:] == ["--summarize"]:
        return summarize_only()
    os.makedirs(RESULTS, exist_ok=True)
    bad = [k for k in KINDS if k not in KIND_NAME] + [s for s in SYSTEM_NAMES if s not in SYSTEMS]
    if bad:
        sys.exit(f"unknown kind or system: {bad}; KINDS from a b c, SYSTEMS from {' '.join(SYSTEMS)}")
    prepare()
    skipped = [(s, SYSTEMS[s]["missing"]()) for s in SYSTEM_NAMES if SYSTEMS[s]["missing"]()]
    for s, why in skipped:
        log(f"skipping {s}: {why}")
    systems = [s for s in SYSTEM_NAMES if s not in dict(skipped)]
    start_cluster()
    cells = []
    try:
        machine()
        for kind in KINDS:
            for s in systems:
                try:
                    cells.append(run_cell(s, kind))
                except Exception as e:  # the other cells still run; summary.md lists the failure
                    log(f"FAILED {s}-{kind}: {e}")
                    skipped.append((f"{s}, kind {kind}", f"FAILED: {e}"))
    finally:
        sh(f"jq_cluster_stop {DATA}")
    write_summary(cells, skipped)
    for kind in KINDS:
        plot(kind, cells)
    log(f"wrote {RESULTS}/summary.md")


def commit_id():
    c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "nogit"
    return c if subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode == 0 else c + "-dirty"


COMMIT = commit_id()
RESULTS = env("RESULTS") or os.path.join(ROOT, f"bench/results/pressure-{time.strftime('%Y-%m-%dT%H%M', time.gmtime())}-{COMMIT}")

if __name__ == "__main__":
    main()
