"""Crash cell for bench/run (psycopg 3, bench/.venv): kill -9 one of N worker processes while it
holds claimed jobs; time until those jobs are claimable again and until they are claimed again.

Usage: crash.py URL WORKERS LEASE_SECS
Starts WORKERS processes (this script in worker mode), each with its own connection. WORKERS - 1
drain queue 'q' (jq.claim n => 10 with lease LEASE_SECS, no-op, jq.complete_many); the victim
claims 10 jobs with the same lease, prints their ids and then sleeps as if its handler hung. One
second later the victim gets SIGKILL: its connection drops, its claim is committed, so the jobs
stay `running` until their lease expires and jq's background worker reaps them (every
jq.tick_interval). This process polls the victim's jobs every 10 ms and prints one JSON line:
ms from the kill until all are `ready` again or claimed by another worker (`claimable_ms`), and
until all have been claimed again (`reclaimed_ms`); the lease left at the kill and the time from
the lease's expiry to claimable (`claimable_after_expiry_ms`: the reaper's share).
"""
import json
import os
import signal
import subprocess
import sys
import time

import psycopg

url = sys.argv[1]
if sys.argv[2] == "worker":
    role, lease = sys.argv[3], sys.argv[4]
    with psycopg.connect(url, autocommit=True) as c:
        claim = f"SELECT id, lease_token FROM jq.claim('q', 'crash-{role}-{os.getpid()}', 10, interval '{lease} seconds')"
        if role == "victim":
            ids = [r[0] for r in c.execute(claim).fetchall()]
            print(json.dumps(ids), flush=True)
            time.sleep(3600)
        while True:
            rows = c.execute(claim).fetchall()
            if rows:
                c.execute("SELECT count(*) FROM jq.complete_many(%s, %s)", ([r[0] for r in rows], [r[1] for r in rows]))
            else:
                time.sleep(0.01)
workers, lease = int(sys.argv[2]), sys.argv[3]
procs = [subprocess.Popen([sys.executable, __file__, url, "worker", "drain", lease]) for _ in range(workers - 1)]
victim = subprocess.Popen([sys.executable, __file__, url, "worker", "victim", lease], stdout=subprocess.PIPE, text=True)
ids = json.loads(victim.stdout.readline())
time.sleep(1)
with psycopg.connect(url, autocommit=True) as c:
    state, expiry = c.execute("SELECT count(*), extract(epoch FROM max(lease_expires_at) - clock_timestamp()) * 1000 "
                              "FROM jq.jobs WHERE id = ANY(%s) AND state = 'running'", (ids,)).fetchone()
    os.kill(victim.pid, signal.SIGKILL)
    t0 = time.monotonic()
    claimable = reclaimed = None
    while time.monotonic() - t0 < 10 * float(lease) + 30:
        ready, again = c.execute(
            "SELECT count(*) FILTER (WHERE state <> 'running' OR claims > 1), count(*) FILTER (WHERE claims > 1) "
            "FROM jq.jobs WHERE id = ANY(%s)", (ids,)).fetchone()
        t = (time.monotonic() - t0) * 1000
        if claimable is None and ready == len(ids):
            claimable = round(t)
        if again == len(ids):
            reclaimed = round(t)
            break
        time.sleep(0.01)
for p in procs:
    p.kill()
victim.wait()
for p in procs:
    p.wait()
print(json.dumps({"held": len(ids), "running_at_kill": state, "lease_s": float(lease), "claimable_ms": claimable,
                  "lease_left_at_kill_ms": round(float(expiry)),
                  "claimable_after_expiry_ms": None if claimable is None else round(claimable - float(expiry)),
                  "reclaimed_ms": reclaimed, "workers": workers}))
