// graphile-worker 0.17.3 drain cell for bench/run, in its defaults (one get_job per free slot,
// no local queue) with a no-op task. Usage:
//   node graphile_drain.js PEERS_DIR URL migrate
//   node graphile_drain.js PEERS_DIR URL fill N
//   node graphile_drain.js PEERS_DIR URL drain CONCURRENCY WARM_SECS SECS [MAX_POOL_SIZE [tuned[:N]]]
// (MAX_POOL_SIZE: graphile-worker's maxPoolSize, default 10 (0: the default); bench/run leaves
// the default.) "tuned": its docs' batching (worker.graphile.org/docs/performance#batching):
// a local queue of CONCURRENCY + 1 jobs ("a good starting point is often concurrentJobs + 1"),
// or of N jobs with "tuned:N", and completeJobBatchDelay 250 ms ("we recommend starting with
// ... 250").
// drain prints one JSON line: jobs/s counted in the database (graphile-worker deletes a job when
// it completes) over SECS after WARM_SECS, and the duplicates seen by the handler.
const path = require("path");
const [dir, url, mode, ...rest] = process.argv.slice(2);
const gw = require(path.join(dir, "node_modules/graphile-worker"));
const { Client } = require(path.join(dir, "node_modules/pg"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const db = new Client({ connectionString: url });
  await db.connect();
  const left = async () => Number((await db.query("SELECT count(*) AS n FROM graphile_worker._private_jobs")).rows[0].n);
  if (mode === "migrate") {
    await gw.runMigrations({ connectionString: url });
  } else if (mode === "fill") {
    let n = Number(rest[0]);
    while (n > 0) {
      const k = Math.min(n, 50000);
      await db.query(
        `SELECT count(*) FROM graphile_worker.add_jobs((SELECT array_agg(ROW('noop', '{"n":1}'::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec) FROM generate_series(1, $1)))`,
        [k]
      );
      n -= k;
    }
  } else if (mode === "drain") {
    const [conc, warm, secs, pool] = rest.slice(0, 4).map(Number);
    const tuned = (rest[4] || "").startsWith("tuned");
    const localQueue = tuned && rest[4].includes(":") ? Number(rest[4].split(":")[1]) : conc + 1;
    if (tuned && !(localQueue >= 1)) throw new Error(`bad local queue size in ${rest[4]}`);
    const seen = new Set();
    let dup = 0;
    const runner = await gw.run({
      connectionString: url,
      concurrency: conc,
      ...(pool ? { maxPoolSize: pool } : {}),
      ...(tuned ? { preset: { worker: { localQueue: { size: localQueue }, completeJobBatchDelay: 250 } } } : {}),
      noHandleSignals: true,
      logger: new gw.Logger(() => () => {}),
      taskList: {
        noop: async (_payload, helpers) => {
          const id = String(helpers.job.id);
          if (seen.has(id)) dup++;
          seen.add(id);
        },
      },
    });
    await sleep(warm * 1000);
    const t0 = Date.now(), l0 = await left();
    await sleep(secs * 1000);
    const t1 = Date.now(), l1 = await left();
    await runner.stop();
    const rate = Math.round((l0 - l1) / ((t1 - t0) / 1000));
    console.log(JSON.stringify({ jobs_per_s: rate, concurrency: conc, max_pool_size: pool || 10, tuned, local_queue: tuned ? localQueue : 0, handled: seen.size, duplicates: dup, left: l1, ok: dup === 0 }));
  }
  await db.end();
}
main().catch((e) => { console.error(e); process.exit(1); });
