"use strict";
// What the Node libraries' scripts share: the wall clock in nanoseconds (as the Python workers log it), the start
// barrier (a line on stdin once the harness releases every worker), and a quiet exit on a failed command.

const readline = require("node:readline");

function nowNs() {
  return (BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n).toString();
}

// Says "ready" on stdout, then waits for the harness's "start" line on stdin.
function readyThenStart() {
  process.stdout.write("ready\n");
  return new Promise((resolve) => {
    const lines = readline.createInterface({ input: process.stdin });
    lines.once("line", () => { lines.close(); resolve(); });
  });
}

function run(main) {
  main().then(() => process.exit(0), (error) => {
    process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
    process.exit(1);
  });
}

module.exports = { nowNs, readyThenStart, run };
