// Graphile Worker's benchmark driver: the same protocol as benchmarks/drivers/protocol.py.
//
//   node driver.mjs --dsn DSN setup | enqueue --producers P --count N | bulk --count N [--chunk C]
//                   | latency --rate R --seconds S | work
//
// The worker is configured as Graphile Worker's performance page recommends for throughput:
// concurrentJobs 24, maxPoolSize 25, localQueue { size: 500 } (batched getJobs),
// completeJobBatchDelay 0 and failJobBatchDelay 0 (batched completeJob/failJob). Only warnings
// and errors are logged (its per-job "Completed task" info line is dropped, as every system's
// per-job logging is in this benchmark).
import { writeFileSync, appendFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";

const TASK = "bench_job";
const RESULT_PREFIX = "BENCH-RESULT ";

function parseArgs(argv) {
  const opts = {};
  let command = null;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith("--")) {
      // A flag with no value (--atomic) is true.
      const next = argv[i + 1];
      opts[a.slice(2)] = next === undefined || next.startsWith("--") ? "true" : argv[++i];
    } else if (command === null) {
      command = a;
    } else {
      throw new Error(`unexpected argument ${a}`);
    }
  }
  return { command, opts };
}

const now = () => (performance.timeOrigin + performance.now()) / 1000; // seconds, wall clock
const emit = (result) => console.log(RESULT_PREFIX + JSON.stringify(result));
const quietLogger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[${level}] ${message}`);
});

const stats = { first: null, last: 0, count: 0, buckets: {} };
const latencyFile = process.env.BENCH_LATENCY_FILE;
function recordJob(sent) {
  const t = now();
  if (stats.first === null) stats.first = t;
  stats.last = t;
  stats.count++;
  const bucket = Math.floor(t * 10);
  stats.buckets[bucket] = (stats.buckets[bucket] || 0) + 1;
  if (sent != null && latencyFile) appendFileSync(latencyFile, `${(t - sent).toFixed(6)}\n`);
}
function dumpStats() {
  const dir = process.env.BENCH_STATS_DIR;
  if (dir && stats.first !== null) {
    writeFileSync(join(dir, `${process.pid}.json`), JSON.stringify(stats));
  }
}

async function* paced(rate, seconds) {
  const count = Math.floor(rate * seconds);
  let nextAt = performance.now();
  const deadline = nextAt + seconds * 1000; // behind the rate: fewer jobs, not a longer run
  for (let i = 0; i < count; i++) {
    yield;
    if (performance.now() >= deadline) return;
    nextAt += 1000 / rate;
    const delay = nextAt - performance.now();
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
  }
}

function* chunks(count, chunk) {
  const size = chunk || count;
  for (let done = 0; done < count; done += size) yield Math.min(size, count - done);
}

async function main() {
  const { command, opts } = parseArgs(process.argv.slice(2));
  const connectionString = opts.dsn;
  if (command === "setup") {
    await runMigrations({ connectionString, logger: quietLogger });
  } else if (command === "enqueue") {
    const producers = Number(opts.producers || 1);
    const perProducer = Math.floor(Number(opts.count) / producers);
    // One pool connection per producer, as the Python drivers have.
    const utils = await makeWorkerUtils({
      connectionString,
      maxPoolSize: producers,
      logger: quietLogger,
    });
    await Promise.all(Array.from({ length: producers }, () => utils.addJob(TASK, {})));
    const started = performance.now();
    await Promise.all(
      Array.from({ length: producers }, async () => {
        for (let i = 0; i < perProducer; i++) await utils.addJob(TASK, {});
      }),
    );
    const elapsed = (performance.now() - started) / 1000;
    emit({ rate: (producers * perProducer) / elapsed });
    await utils.release();
  } else if (command === "bulk") {
    const utils = await makeWorkerUtils({ connectionString, logger: quietLogger });
    await utils.addJob(TASK, {});
    const count = Number(opts.count);
    const started = performance.now();
    for (const n of chunks(count, Number(opts.chunk || 0))) {
      await utils.addJobs(Array.from({ length: n }, () => ({ identifier: TASK, payload: {} })));
    }
    emit({ rate: count / ((performance.now() - started) / 1000) });
    await utils.release();
  } else if (command === "latency") {
    const utils = await makeWorkerUtils({ connectionString, logger: quietLogger });
    let sent = 0;
    const started = performance.now();
    for await (const _ of paced(Number(opts.rate), Number(opts.seconds))) {
      await utils.addJob(TASK, { sent: now() });
      sent++;
    }
    emit({ sent, seconds: (performance.now() - started) / 1000 });
    await utils.release();
  } else if (command === "work") {
    // Worker settings go in a preset: run() maps only its legacy options (concurrency,
    // maxPoolSize, ...) and ignores the newer ones (localQueue, batch delays) given directly.
    const runner = await run({
      noHandleSignals: true,
      logger: quietLogger,
      taskList: {
        [TASK]: async (payload) => {
          recordJob(payload && payload.sent != null ? payload.sent : null);
        },
      },
      preset: {
        worker: {
          connectionString,
          concurrentJobs: Number(opts.concurrency || 24),
          maxPoolSize: Number(opts["pool-size"] || 25),
          localQueue: { size: Number(opts["local-queue"] || 500) },
          completeJobBatchDelay: 0,
          failJobBatchDelay: 0,
        },
      },
    });
    let stopping = false;
    const stop = async () => {
      if (stopping) return;
      stopping = true;
      await runner.stop();
      dumpStats();
      process.exit(0);
    };
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
    await runner.promise;
  } else {
    throw new Error(`unknown command ${command}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
