"""Claim cost against queue depth, for bench/run's `depth` cell (psycopg 3, bench/.venv).

Usage: claim_depth.py URL SYSTEM ITERS [SAMPLES_FILE]      SYSTEM: jq | floor
(SAMPLES_FILE, if given, gets every measured latency in ms, one a line, for the CDF plots.)
One connection, ITERS iterations of: the claim of one job (timed: the statement's round trip,
prepared after its 5th run as psycopg does), then, untimed, its completion and the enqueue of one
replacement job, so that the claimable depth stays what bench/run filled. Prints one JSON line
with p50/p95/p99/mean of the claim in ms (first 10% of the iterations excluded as warm-up).
"""
import json
import statistics
import sys
import time

import psycopg

url, system, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
STMTS = {
    "jq": ("SELECT id, lease_token FROM jq.claim('q', 'w')",
           "SELECT jq.complete(%s, %s)",
           "SELECT jq.enqueue('q', '{\"n\":1}')"),
    "floor": ("WITH c AS (SELECT id FROM floor_jobs WHERE queue = 'q' AND state = 'ready' "
              "ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
              "UPDATE floor_jobs j SET state = 'running', attempt = j.attempt + 1, worker = 'w', "
              "lease_token = gen_random_uuid(), lease_expires_at = now() + interval '5 minutes' "
              "FROM c WHERE j.id = c.id RETURNING j.id, j.lease_token",
              "UPDATE floor_jobs SET state = 'completed' WHERE id = %s AND lease_token = %s AND state = 'running'",
              "INSERT INTO floor_jobs (queue, state, payload) VALUES ('q', 'ready', '{\"n\":1}')"),
}
claim, complete, refill = STMTS[system]
lat = []
with psycopg.connect(url, autocommit=True) as c:
    for i in range(iters):
        t = time.perf_counter()
        row = c.execute(claim).fetchone()
        lat.append((time.perf_counter() - t) * 1000)
        if row is None:
            print(json.dumps({"error": "nothing claimable"}))
            sys.exit(1)
        c.execute(complete, row)
        c.execute(refill)
lat = sorted(lat[iters // 10:])
if len(sys.argv) > 4:
    with open(sys.argv[4], "w") as f:
        f.write("\n".join(f"{x:.4f}" for x in lat) + "\n")
pct = lambda p: lat[min(len(lat) - 1, round(p / 100 * (len(lat) - 1)))]
print(json.dumps({"p50_ms": round(pct(50), 3), "p95_ms": round(pct(95), 3), "p99_ms": round(pct(99), 3),
                  "mean_ms": round(statistics.mean(lat), 3), "n": len(lat)}))
