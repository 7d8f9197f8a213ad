"use strict";
// graphile-worker raced with its own worker: runOnce at concurrency 1, which takes jobs until none is left and
// returns. Commands: install URL | enqueue URL N | enqueuer URL | unlock URL WORKER_ID | work URL LOG [JOB_MS]
// (harness/libraries/graphile_worker/adapter.py
// runs them). A fault run's worker keeps polling (run, not runOnce) until SIGTERM, and each job lasts JOB_MS and
// logs its end.

const fs = require("node:fs");
const { Pool } = require("pg");
const { Logger, makeWorkerUtils, run: runWorker, runMigrations, runOnce } = require("graphile-worker");
const { hold, nowNs, readyThenStart, run, sayReadings, serveEnqueues } = require("../node/common.cjs");

const quiet = new Logger(() => () => {});
const [command, url, arg, jobMsArg] = process.argv.slice(2);

// n no-op jobs numbered from `from`, in batches of 1000 at most
async function add(utils, n, from) {
  for (let first = 0; first < n; first += 1000) {
    const specs = [];
    for (let i = first; i < Math.min(n, first + 1000); i++) specs.push({ identifier: "noop", payload: { n: from + i } });
    await utils.addJobs(specs);
  }
}

run(async () => {
  if (command === "install") {
    await runMigrations({ connectionString: url, logger: quiet });
  } else if (command === "enqueue") {
    const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
    try {
      await add(utils, Number(arg), 0);
    } finally {
      await utils.release();
    }
  } else if (command === "enqueuer") {
    const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
    try {
      await serveEnqueues((n, first) => add(utils, n, first));
    } finally {
      await utils.release();
    }
  } else if (command === "unlock") {
    // what a user runs once a worker is declared dead: forceUnlockWorkers (dist/interfaces.d.ts: "Only use this if
    // the workers in question are no longer running")
    const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
    try {
      await utils.forceUnlockWorkers([arg]);
    } finally {
      await utils.release();
    }
  } else if (command === "work") {
    const out = fs.openSync(arg, "a");
    const pool = new Pool({ connectionString: url, max: 2 });
    const onError = (error) => process.stderr.write(`${error.message}\n`);
    pool.on("error", onError);
    pool.on("connect", (client) => client.on("error", onError));
    (await pool.connect()).release(); // connected before the worker says it is ready
    await readyThenStart();
    const jobMs = jobMsArg ? Number(jobMsArg) : null;
    // its documented setting for a transaction pooler, where the harness asks for it (harness/libraries/settings.py)
    const noPreparedStatements = process.env.CLAIMRACE_POOLER_SETTING === "documented";
    const taskList = { noop: async (payload, helpers) => {
      fs.writeSync(out, `${helpers.job.id} ${nowNs()} ${process.pid}\n`);
      if (jobMs !== null) {
        await hold(helpers.job.id, jobMs);
        fs.writeSync(out, `${helpers.job.id} ${nowNs()} ${process.pid} end\n`);
      }
    } };
    if (jobMs === null) {
      await runOnce({ pgPool: pool, concurrency: 1, noHandleSignals: true, taskList, logger: quiet,
                      noPreparedStatements });
    } else {
      const runner = await runWorker({ pgPool: pool, concurrency: 1, noHandleSignals: true, taskList, logger: quiet,
                                       pollInterval: 100, noPreparedStatements });
      process.once("SIGTERM", () => runner.stop());
      await runner.promise;
    }
    sayReadings();
    await pool.end();
  } else {
    throw new Error(`unknown command ${command}`);
  }
});
