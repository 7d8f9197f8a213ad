"use strict";
// What the Node libraries' scripts share: the wall clock in nanoseconds (as the Python workers log it), the start
// barrier (a line on stdin once the harness releases every worker), and a quiet exit on a failed command.

const fs = require("node:fs");
const readline = require("node:readline");

function nowNs() {
  return (BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n).toString();
}

// This process's (ns on a CPU, ns waiting for one, timeslices), as the harness reads a Python worker's.
function schedstat() {
  try {
    return fs.readFileSync("/proc/self/schedstat", "utf8").trim().split(/\s+/).slice(0, 3).map(Number);
  } catch {
    return null;
  }
}

let atRelease = null;

// Says "ready" on stdout, then waits for the harness's "start" line on stdin.
function readyThenStart() {
  process.stdout.write("ready\n");
  return new Promise((resolve) => {
    const lines = readline.createInterface({ input: process.stdin });
    lines.once("line", () => { lines.close(); atRelease = schedstat(); resolve(); });
  });
}

// An enqueue kept open (the command "enqueuer"): says "ready", then for each line "N FIRST" on stdin awaits
// send(n, first) and says "ok", one line at a time, until stdin ends.
async function serveEnqueues(send) {
  process.stdout.write("ready\n");
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const [n, first] = line.trim().split(/\s+/).map(Number);
    await send(n, first);
    process.stdout.write("ok\n");
  }
}

// A worker's last line: its scheduler readings at its release and now.
function sayReadings() {
  process.stdout.write(`${JSON.stringify({ at_release: atRelease, at_end: schedstat() })}\n`);
}

// A fault run's job: jobMs long, or, where the harness set CLAIMRACE_GATE_DIR (the stale-completion probe,
// harness/gate.py), until the file "<job>-<pid>" appears there, at most MAX_HOLD_MS.
const MAX_HOLD_MS = 300000;
async function hold(job, jobMs) {
  const directory = process.env.CLAIMRACE_GATE_DIR;
  if (!directory) return new Promise((resolve) => setTimeout(resolve, jobMs));
  const gate = `${directory}/${job}-${process.pid}`;
  const deadline = Date.now() + MAX_HOLD_MS;
  while (!fs.existsSync(gate) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
}

function run(main) {
  main().then(() => process.exit(0), (error) => {
    process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
    process.exit(1);
  });
}

module.exports = { hold, nowNs, readyThenStart, run, sayReadings, serveEnqueues };
