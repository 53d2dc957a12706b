"""awa 0.6.9 (PyPI awa-pg, its Rust core under the Python SDK) at a fixed offered load, the peer of
`jq-bench pressure` in bench/pressure: the same contract, so the orchestrator launches either.

Usage: python awa_pressure.py URL QUEUE SCHEDULE CONSUMERS OUTCSV [--saturate DEPTH]
  URL       libpq URL of database `awa`; awa's schema is created or migrated there with its own
            migration API (`AsyncClient.migrate()`, idempotent: a migrated database is left as is).
  SCHEDULE  comma-separated SECS:RATE segments, e.g. 120:800,120:1200,120:800.
  CONSUMERS awa workers: one worker runtime (`AsyncClient.start`) with max_workers = CONSUMERS on
            QUEUE, async no-op handler; everything else awa's defaults (queue storage, claim batch
            512, NOTIFY wakeups with a 200 ms poll, pool of 10 connections).
  OUTCSV    one line per picked-up job `t_s,pickup_ms`; a job not picked up within 10 s after the
            schedule ends: `t_s,missing` with the t_s of its enqueue.
Last stdout line: JSON {"enqueued":N,"completed":M,"missing":K, ...}; `schedule_start_s` in it is
the t_s at which the schedule's first segment began (about 0.4 s once awa's schema exists; its first
migration of an empty database takes 5-10 s more here). Also: `duplicates` (a job's handler started
again), `early` (below), `stale` (jobs of an earlier run found in QUEUE, run and ignored),
`cancelled_leftover` (jobs still queued at the end, cancelled with awa's `drain_queue` so that
the next run starts clean: a pending job in a queue nobody works stops awa's prune and ring
rotation for every queue of the database).
       python awa_pressure.py URL --migrate-only   creates or migrates awa's schema and exits, so that
an orchestrator can do it before it starts its own clock.

Producers (PRODUCERS, 4 coroutines with their own client and pool) insert open-loop: every
TICK_MS (20 ms) each inserts the jobs the schedule has made due since its last batch, with
`enqueue_many_copy` (COPY straight into queue storage, the bulk path awa's docs give for
producers). Each job's args carry a sequence number; its enqueue timestamp is taken on
time.monotonic() right after the COPY returns (committed), in this same process, so producers
and consumers share one monotonic clock. pickup = monotonic() when the handler starts - that
timestamp. A handler can start before its producer has read the COPY's answer: that is 0 ms,
as in jq-bench latency (counted in `early`).

--saturate DEPTH: instead of the rates (SCHEDULE then gives only the segments' lengths), the
producers keep DEPTH jobs enqueued and not yet picked up (counted in this process), topping up in
batches of at most 500; prints the completion rate per segment (`jobs_per_s`). The backlog left
at the end is not counted missing.

Maintenance: the worker runtime started here also runs awa's maintenance loop and wins its
leader election (one advisory lock per database), as awa's deployment docs describe for every
worker process: ring rotation, prune by TRUNCATE, rescue, promotion. The final JSON reports
`leader` (health check at the end of the schedule) and `rotations`, how often each of its rings
(queue, lease, claim) rotated during the schedule, so a run without maintenance shows.
"""
import asyncio
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import awa

T0 = time.monotonic()
TICK = float(os.environ.get("TICK_MS", "20")) / 1000
PRODUCERS = int(os.environ.get("PRODUCERS", "4"))
GRACE = 10.0  # seconds after the schedule for a job to be picked up before it counts missing
SAT_BATCH = 500
RUN = time.time_ns()


@dataclass
class PressureJob:
    run: int  # this process's id: a job left in QUEUE by an earlier run is not one of ours
    seq: int


def parse_schedule(text):
    segs = []
    for part in text.split(","):
        secs, rate = part.split(":")
        segs.append((float(secs), float(rate)))
    return segs


def due_jobs(segs, elapsed):
    """Jobs the schedule has offered by `elapsed` seconds after its start (open loop)."""
    total, t = 0.0, 0.0
    for secs, rate in segs:
        span = min(secs, max(0.0, elapsed - t))
        total += span * rate
        t += secs
    return math.floor(total)


class Record:
    """Per job (by seq): enqueue and pickup times on the shared monotonic clock."""

    def __init__(self):
        self.enq = {}  # seq -> monotonic after the COPY returned
        self.pick = {}  # seq -> monotonic at handler start (first pickup only)
        self.dup = 0
        self.early = 0
        self.returned = 0  # handler calls for this run's jobs (a second call of one job counts twice)
        self.stale = 0

    def picked(self, run, seq, now):
        if run != RUN:
            self.stale += 1
            return
        self.returned += 1
        if seq in self.pick:
            self.dup += 1
        else:
            self.pick[seq] = now

    def enqueued(self, seqs, now):
        for s in seqs:
            self.enq[s] = now


async def produce_rate(client, queue, segs, start, p, rec):
    """Producer p sends the jobs with global index i = p (mod PRODUCERS) the schedule has made due."""
    end = start + sum(s for s, _ in segs)
    sent = 0
    tick = start + TICK * p / PRODUCERS
    while True:
        now = time.monotonic()
        if now < tick:
            await asyncio.sleep(tick - now)
        tick += TICK
        due_all = due_jobs(segs, min(time.monotonic(), end) - start)
        mine = (due_all - p + PRODUCERS - 1) // PRODUCERS
        if mine > sent:
            seqs = list(range(p + PRODUCERS * sent, p + PRODUCERS * mine, PRODUCERS))
            await client.enqueue_many_copy([PressureJob(run=RUN, seq=s) for s in seqs], queue=queue)
            rec.enqueued(seqs, time.monotonic())
            sent = mine
        if time.monotonic() >= end and sent == (due_jobs(segs, end - start) - p + PRODUCERS - 1) // PRODUCERS:
            return


async def produce_saturate(client, queue, end, depth, p, rec, counter):
    """Producer p tops the jobs enqueued and not yet picked up back up to DEPTH."""
    while time.monotonic() < end:
        outstanding = len(rec.enq) + counter["inflight"] - len(rec.pick)
        n = min(SAT_BATCH, (depth - outstanding) // PRODUCERS)
        if n <= 0:
            await asyncio.sleep(0.005)
            continue
        seqs = list(range(counter["next"], counter["next"] + n))
        counter["next"] += n
        counter["inflight"] += n
        await client.enqueue_many_copy([PressureJob(run=RUN, seq=s) for s in seqs], queue=queue)
        counter["inflight"] -= n
        rec.enqueued(seqs, time.monotonic())


RINGS = "SELECT q.generation AS queue_gen, l.generation AS lease_gen, c.generation AS claim_gen " \
        "FROM awa.queue_ring_state q, awa.lease_ring_state l, awa.claim_ring_state c"


async def ring_generations(client):
    """awa's ring generations: each rotation by its maintenance leader adds one."""
    async with await client.transaction() as tx:
        row = await tx.fetch_one(RINGS)
        await tx.commit()
    return row


async def main():
    if sys.argv[2:3] == ["--migrate-only"]:
        await awa.AsyncClient(sys.argv[1]).migrate()
        return
    args = [a for a in sys.argv[1:] if not a.startswith("--saturate")]
    depth = None
    if "--saturate" in sys.argv:
        i = sys.argv.index("--saturate")
        depth = int(sys.argv[i + 1])
        args.remove(sys.argv[i + 1])
    if len(args) != 5:
        sys.exit(__doc__)
    url, queue, schedule, consumers, outcsv = args
    segs, consumers = parse_schedule(schedule), int(consumers)

    workers = awa.AsyncClient(url)
    await workers.migrate()
    producer = awa.AsyncClient(url, max_connections=PRODUCERS + 1)
    rec = Record()

    @workers.task(PressureJob, queue=queue)
    async def handle(job):
        rec.picked(job.args.run, job.args.seq, time.monotonic())

    rings0 = await ring_generations(producer)
    await workers.start([(queue, consumers)])
    start = time.monotonic() + 0.3
    end = start + sum(s for s, _ in segs)
    await asyncio.sleep(0.3)
    if depth is None:
        await asyncio.gather(*(produce_rate(producer, queue, segs, start, p, rec) for p in range(PRODUCERS)))
    else:
        counter = {"next": 0, "inflight": 0}
        await asyncio.gather(*(produce_saturate(producer, queue, end, depth, p, rec, counter)
                               for p in range(PRODUCERS)))
    health = await workers.health_check()
    leader = health.leader
    rings1 = await ring_generations(producer)
    done_at = time.monotonic()
    while depth is None and len(rec.pick) < len(rec.enq) and time.monotonic() < end + GRACE:
        await asyncio.sleep(0.05)
    await workers.shutdown()
    # Jobs left available (missing ones, or the backlog --saturate keeps) are cancelled: an awa
    # queue nobody works keeps its ready rows pending, and a pending row stops the maintenance
    # leader's prune of its ring slot, and with it the ring's rotation, for every queue of the
    # database (seen here: a few leftover jobs froze the queue ring for the next runs).
    leftover = await workers.drain_queue(queue)
    await producer.close()
    await workers.close()

    missing = 0
    # A pickup after the grace (rates) or after the schedule (saturation) is not one of this run's.
    last = done_at if depth is not None else end + GRACE
    rec.pick = {s: t for s, t in rec.pick.items() if t < last}
    with open(outcsv, "w") as out:
        rows = []
        for seq, te in rec.enq.items():
            tp = rec.pick.get(seq)
            if tp is None:
                if depth is None:
                    missing += 1
                    rows.append((te - T0, "missing"))
                continue
            if tp < te:
                rec.early += 1
            rows.append((tp - T0, f"{max(0.0, tp - te) * 1000:.3f}"))
        rows.sort(key=lambda r: r[0])
        out.writelines(f"{t:.3f},{v}\n" for t, v in rows)
    result = {"enqueued": len(rec.enq), "completed": rec.returned, "missing": missing,
              "duplicates": rec.dup, "early": rec.early, "stale": rec.stale, "leader": leader,
              "cancelled_leftover": leftover,
              "rotations": {k[:-4]: rings1[k] - rings0[k] for k in rings0},
              "schedule_start_s": round(start - T0, 3)}
    if depth is not None:
        bounds, t = [], start
        for secs, _ in segs:
            bounds.append((t, t + secs))
            t += secs
        picks = sorted(rec.pick.values())
        result["jobs_per_s"] = [round(sum(1 for x in picks if a <= x < b) / (b - a), 1) for a, b in bounds]
        result["depth"] = depth
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
