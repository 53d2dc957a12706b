// pg-boss 10.4.2 cells for bench/run. Usage:
//   node pgboss_drain.js PEERS_DIR URL setup                 schema (boss.start) and queue 'q'
//   node pgboss_drain.js PEERS_DIR URL fill N                boss.insert, 10,000 jobs per call
//   node pgboss_drain.js PEERS_DIR URL drain MODE CONC BATCH WARM_SECS SECS
//        MODE work:  CONC boss.work() workers in its defaults (pollingIntervalSeconds 2, batchSize
//                    BATCH): a worker sleeps the rest of its poll interval after each fetch
//        MODE fetch: CONC loops of boss.fetch(q, {batchSize: BATCH}) + boss.complete(q, ids), its
//                    documented manual API (the shape that lets pg-boss run as fast as it can)
//   node pgboss_drain.js PEERS_DIR URL bulk PRODUCERS SECS   boss.insert of 1,000 jobs per call
//   node pgboss_drain.js PEERS_DIR URL send PRODUCERS SECS   boss.send of one job per call
// drain prints one JSON line: jobs/s counted in the database (rows turned 'completed') over SECS
// after WARM_SECS, the duplicates the handler saw and the process's CPU in that interval.
const path = require("path");
const [dir, url, mode, ...rest] = process.argv.slice(2);
const PgBoss = require(path.join(dir, "node_modules/pg-boss"));
const { Client } = require(path.join(dir, "node_modules/pg"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };

async function main() {
  const boss = new PgBoss({ connectionString: url, max: 80, supervise: mode === "setup", schedule: false });
  boss.on("error", (e) => console.error("pg-boss error:", e.message));
  await boss.start();
  const db = new Client({ connectionString: url });
  await db.connect();
  const completed = async () => Number((await db.query("SELECT count(*) AS n FROM pgboss.job WHERE name = 'q' AND state = 'completed'")).rows[0].n);
  const jobs = (k) => Array.from({ length: k }, () => ({ name: "q", data: { n: 1 } }));
  if (mode === "setup") {
    await boss.createQueue("q");
    await boss.createQueue("e");
  } else if (mode === "fill") {
    let n = Number(rest[0]);
    while (n > 0) { const k = Math.min(n, 10000); await boss.insert(jobs(k)); n -= k; }
  } else if (mode === "drain") {
    const [m, conc, batch, warm, secs] = [rest[0], ...rest.slice(1).map(Number)];
    const seen = new Set();
    let dup = 0, stop = false;
    const note = (j) => { if (seen.has(j.id)) dup++; seen.add(j.id); };
    const loops = [];
    if (m === "work") {
      for (let i = 0; i < conc; i++) await boss.work("q", { batchSize: batch }, async (js) => { js.forEach(note); });
    } else {
      for (let i = 0; i < conc; i++) loops.push((async () => {
        while (!stop) {
          const js = await boss.fetch("q", { batchSize: batch });
          if (!js || js.length === 0) { await sleep(50); continue; }
          js.forEach(note);
          await boss.complete("q", js.map((j) => j.id));
        }
      })());
    }
    await sleep(warm * 1000);
    const t0 = Date.now(), c0 = await completed(), u0 = cpu();
    await sleep(secs * 1000);
    const t1 = Date.now(), c1 = await completed(), u1 = cpu();
    stop = true;
    await Promise.all(loops);
    if (m === "work") await boss.offWork("q");
    const rate = Math.round((c1 - c0) / ((t1 - t0) / 1000));
    console.log(JSON.stringify({ jobs_per_s: rate, mode: m, concurrency: conc, batch, handled: seen.size, duplicates: dup,
                                 client_cpu_s: +(u1 - u0).toFixed(3), jobs: c1 - c0, ok: dup === 0 }));
  } else if (mode === "bulk") {
    const [producers, secs] = rest.map(Number);
    let n = 0, stop = false;
    const t0 = Date.now();
    const ps = Array.from({ length: producers }, async () => {
      while (!stop) { await boss.insert(jobs(1000).map((j) => ({ ...j, name: "e" }))); n += 1000; }
    });
    await sleep(secs * 1000); stop = true; await Promise.all(ps);
    console.log(JSON.stringify({ jobs_per_s: Math.round(n / ((Date.now() - t0) / 1000)), producers }));
  } else if (mode === "send") {
    // PRODUCERS concurrent loops of boss.send (one job, one INSERT per call) over the pool
    const [producers, secs] = rest.map(Number);
    let n = 0, stop = false;
    const t0 = Date.now();
    const ps = Array.from({ length: producers }, async () => {
      while (!stop) { await boss.send("e", { n: 1 }); n += 1; }
    });
    await sleep(secs * 1000); stop = true; await Promise.all(ps);
    console.log(JSON.stringify({ jobs_per_s: Math.round(n / ((Date.now() - t0) / 1000)), producers }));
  }
  await db.end();
  await boss.stop({ graceful: false, wait: true, timeout: 2000 }).catch(() => {});
}
main().then(() => process.exit(0)).catch((e) => { console.error(e); process.exit(1); });
