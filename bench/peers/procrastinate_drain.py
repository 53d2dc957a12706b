"""procrastinate 3.10.0 drain cell for bench/run: its defaults (LISTEN/NOTIFY on, finished jobs
kept as 'succeeded'), concurrency CONC, its psycopg pool raised to CONC + 4 connections (the
default pool of 4 would starve 8 workers), and a no-op async task that records job ids.

Usage: python procrastinate_drain.py URL CONC WARM_SECS SECS
Prints one JSON line: jobs/s counted in the database (rows turned 'succeeded') over SECS after
WARM_SECS, and the duplicates the task saw. The schema (sql/schema.sql of the package) and the
prefill (rows for task 'noop' in queue 'default') are bench/run's.
"""
import asyncio
import json
import sys
import time

import procrastinate
import psycopg

url, conc, warm, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=conc + 4))
seen: set[int] = set()
dup = 0


@app.task(name="noop", pass_context=True)
async def noop(context, **kwargs):
    global dup
    if context.job.id in seen:
        dup += 1
    seen.add(context.job.id)


async def main():
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as mon:
        async def done():
            cur = await mon.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
            return (await cur.fetchone())[0]

        async with app.open_async():
            worker = asyncio.create_task(
                app.run_worker_async(concurrency=conc, wait=True, install_signal_handlers=False)
            )
            await asyncio.sleep(warm)
            t0, c0 = time.monotonic(), await done()
            await asyncio.sleep(secs)
            t1, c1 = time.monotonic(), await done()
            worker.cancel()
            try:
                await asyncio.wait_for(worker, 30)
            except (asyncio.CancelledError, asyncio.TimeoutError):
                pass
    rate = round((c1 - c0) / (t1 - t0))
    print(json.dumps({"jobs_per_s": rate, "concurrency": conc, "handled": len(seen), "duplicates": dup, "ok": dup == 0}))


asyncio.run(main())
