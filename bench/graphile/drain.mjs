// drain.mjs: one graphile-worker drain of no-op jobs for bench/graphile_test.go.
//
//   node drain.mjs <connection string> <schema> <rows> <local|plain>
//
// It migrates the schema, empties the jobs table, enqueues <rows> no-op jobs
// and prints "READY"; on "GO" (stdin) it starts a worker (application_name
// suffixed "-worker", so the Go side can read its backends' CPU), prints
// "DONE <ms>" once every job has run and its deletion is written, then
// waits for "STOP" to shut down (its backends stay up until then).
//
// Modes: "local" is graphile-worker's batched mode (a local queue of 500
// jobs fetched per query, completions batched with completeJobBatchDelay
// 0 ms); "plain" fetches one job per query and completes each alone. Both
// run concurrentJobs 100 on a pool of 12 connections.
import { run, makeWorkerUtils, Logger } from "graphile-worker";
import readline from "node:readline";

const [conn, schema, rowsArg, mode] = process.argv.slice(2);
const rows = Number(rowsArg);
const withApp = (suffix) => {
  const u = new URL(conn);
  u.searchParams.set("application_name", (u.searchParams.get("application_name") ?? "bench-graphile") + suffix);
  return u.toString();
};
const lines = readline.createInterface({ input: process.stdin });
const nextLine = (() => {
  const it = lines[Symbol.asyncIterator]();
  return async () => (await it.next()).value;
})();

// Silent: graphile-worker logs every job by default, which would be the
// figure's bottleneck.
const logger = new Logger(() => () => {});
const utils = await makeWorkerUtils({ connectionString: withApp("-utils"), schema, logger });
await utils.migrate();
await utils.withPgClient((c) => c.query(`DELETE FROM "${schema}"._private_jobs`));
for (let lo = 0; lo < rows; lo += 5000) {
  const n = Math.min(5000, rows - lo);
  await utils.addJobs(Array.from({ length: n }, () => ({ identifier: "noop", payload: {} })));
}
await utils.withPgClient((c) => c.query(`ANALYZE "${schema}"._private_jobs`));
console.log("READY");
if ((await nextLine()) !== "GO") process.exit(2);

const preset = {
  worker: {
    connectionString: withApp("-worker"),
    schema,
    logger,
    concurrentJobs: 100,
    maxPoolSize: 12,
    pollInterval: 1000,
    ...(mode === "local"
      ? { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 }
      : {}),
  },
};
let completed = 0;
let allRun;
const ran = new Promise((resolve) => (allRun = resolve));
const start = process.hrtime.bigint();
const runner = await run({
  preset,
  noHandleSignals: true,
  taskList: {
    noop: async () => {
      if (++completed === rows) allRun();
    },
  },
});
await ran;
// The last completions may still be on their way to the table.
for (;;) {
  const { rows: r } = await utils.withPgClient((c) => c.query(`SELECT count(*)::int AS n FROM "${schema}"._private_jobs`));
  if (r[0].n === 0) break;
  await new Promise((res) => setTimeout(res, 1));
}
const ms = Number(process.hrtime.bigint() - start) / 1e6;
console.log(`DONE ${ms}`);
await nextLine();
await runner.stop();
await utils.release();
process.exit(0);
