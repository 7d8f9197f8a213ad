"use strict";
// pg-boss raced with its own worker: boss.work() on one queue, one job per fetch. Its loop never stops on an
// empty queue: the harness stops it with SIGTERM once every job has run, and it stops gracefully.
// Commands: install URL | enqueue URL N [EXPIRE_S] | enqueuer URL [EXPIRE_S] | work URL LOG POLL_S [JOB_MS
// MAINTENANCE_S]
// (harness/libraries/pgboss/adapter.py runs them). A fault run's jobs expire after EXPIRE_S, each lasts JOB_MS and logs
// its end, and every worker supervises (its maintenance every MAINTENANCE_S).

const fs = require("node:fs");
const PgBoss = require("pg-boss");
const { hold, nowNs, readyThenStart, run, sayReadings, serveEnqueues } = require("../node/common.cjs");

const QUEUE = "claimrace";
const [command, url, arg, pollArg, jobMsArg, maintenanceArg] = process.argv.slice(2);
// no maintenance and no cron in the raced processes: only the claim loop (a fault run: the maintenance too)
const boss = (migrate, maintenanceSeconds) => new PgBoss({
  connectionString: url, max: 2, schedule: false, migrate,
  ...(maintenanceSeconds ? { supervise: true, maintenanceIntervalSeconds: maintenanceSeconds } : { supervise: false }),
});

// n jobs numbered from `from`, in inserts of 1000 at most; a fault run's expire after expireArg seconds
async function insert(b, n, from, expireArg) {
  const expiry = expireArg ? { expireInSeconds: Number(expireArg) } : {};
  for (let first = 0; first < n; first += 1000) {
    const jobs = [];
    for (let i = first; i < Math.min(n, first + 1000); i++) jobs.push({ name: QUEUE, data: { n: from + i }, ...expiry });
    await b.insert(jobs);
  }
}

run(async () => {
  if (command === "install") {
    const b = boss(true);
    await b.start();
    await b.createQueue(QUEUE);
    await b.stop({ graceful: false, wait: true });
  } else if (command === "enqueue") {
    const b = boss(false);
    await b.start();
    // the jobs are numbered (data.n) from CLAIMRACE_FIRST_JOB: a soak's arrivals enqueue again and again
    await insert(b, Number(arg), Number(process.env.CLAIMRACE_FIRST_JOB || 0), process.argv[5]);
    await b.stop({ graceful: false, wait: true });
  } else if (command === "enqueuer") {
    const b = boss(false);
    await b.start();
    await serveEnqueues((n, first) => insert(b, n, first, arg));
    await b.stop({ graceful: false, wait: true });
  } else if (command === "work") {
    const out = fs.openSync(arg, "a");
    const jobMs = jobMsArg ? Number(jobMsArg) : null;
    const b = boss(false, jobMs === null ? null : Number(maintenanceArg));
    b.on("error", (error) => process.stderr.write(`${error.message}\n`));
    await b.start();
    await readyThenStart();
    const stopped = new Promise((resolve) => process.once("SIGTERM", resolve));
    await b.work(QUEUE, { batchSize: 1, pollingIntervalSeconds: Number(pollArg) }, async ([job]) => {
      fs.writeSync(out, `${job.data.n} ${nowNs()} ${process.pid}\n`);
      if (jobMs !== null) {
        await hold(job.data.n, jobMs);
        fs.writeSync(out, `${job.data.n} ${nowNs()} ${process.pid} end\n`);
      }
    });
    await stopped;
    sayReadings();
    await b.stop({ graceful: true, wait: true, timeout: 5000 });
  } else {
    throw new Error(`unknown command ${command}`);
  }
});
