"""procrastinate 3.10.0 drain cell for bench/run: its defaults (LISTEN/NOTIFY on, finished jobs
kept as 'succeeded'), concurrency CONC, its psycopg pool raised to CONC + 4 connections (the
default pool of 4 would starve 8 workers), and a no-op async task that records job ids.
With a 5th argument `tuned`: the same worker with `delete_jobs="successful"`, the option its
docs give for keeping the jobs table small (`run_worker_async`'s docstring; the how-to
"Delete finished jobs"): a finished job's row is deleted instead of kept.

Usage: python procrastinate_drain.py URL CONC WARM_SECS SECS [tuned]
Prints one JSON line: jobs/s counted in the database (rows that left 'todo'/'doing', i.e.
turned 'succeeded' or were deleted as such) over SECS after WARM_SECS, and the duplicates the
task saw. The schema (sql/schema.sql of the package) and the
prefill (rows for task 'noop' in queue 'default') are bench/run's.
"""
import asyncio
import json
import sys
import time

import procrastinate
import psycopg

url, conc, warm, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
tuned = len(sys.argv) > 5 and sys.argv[5] == "tuned"
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
        cur = await mon.execute("SELECT count(*) FROM procrastinate_jobs")
        total = (await cur.fetchone())[0]

        async def done():
            # tuned deletes succeeded rows: count what is no longer waiting or running
            cur = await mon.execute("SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')")
            return total - (await cur.fetchone())[0]

        async with app.open_async():
            worker = asyncio.create_task(
                app.run_worker_async(concurrency=conc, wait=True, install_signal_handlers=False,
                                     **({"delete_jobs": "successful"} if tuned else {}))
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
    print(json.dumps({"jobs_per_s": rate, "concurrency": conc, "tuned": tuned, "handled": len(seen), "duplicates": dup, "ok": dup == 0}))


asyncio.run(main())
