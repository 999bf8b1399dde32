#!/usr/bin/env node
// submit.mjs queues one job on a scribe store through its daemon and waits
// for the outcome, which it prints as JSON.
//
//   node submit.mjs [--id ID] [--wait SECONDS] STORE OP PATH [DATA|-]
//
// OP is put, append, merge or delete; DATA is read from stdin when it is
// "-" or absent (not for delete). Exit codes are scribe submit's: 0
// applied, 1 rejected (the reason on stderr) or failed, 2 usage, 69 no
// daemon serves the store, 75 busy: the queue is full, or the outcome is
// not known yet (run it again with the same --id: that is safe).

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { connectDaemon, discover, EXIT, newJobId, ScribeError, submit } from "./scribe.mjs";

const usage = "usage: node submit.mjs [--id ID] [--wait SECONDS] STORE OP PATH [DATA|-]";

function fail(message, code) {
  console.error(`submit.mjs: ${message}`);
  process.exit(code);
}

let args;
try {
  args = parseArgs({
    allowPositionals: true,
    options: { id: { type: "string" }, wait: { type: "string", default: "60" } },
  });
} catch (err) {
  fail(`${err.message}\n${usage}`, EXIT.usage);
}
const [store, op, path, data] = args.positionals;
const id = args.values.id ?? newJobId();
const waitSeconds = Number(args.values.wait);
if (!store || !op || !path || args.positionals.length > 4) fail(usage, EXIT.usage);
if (!["put", "append", "merge", "delete"].includes(op)) fail(`unknown op ${op}: want put, append, merge or delete`, EXIT.usage);
if (op === "delete" && data !== undefined) fail("delete takes no DATA", EXIT.usage);
// An ID the daemon cannot read gets no outcome at all (a dead letter).
if (!/^[A-Za-z0-9_-]{1,128}$/.test(id)) fail(`job id ${JSON.stringify(id)}: want 1-128 characters of [A-Za-z0-9_-]`, EXIT.usage);
if (!(waitSeconds > 0)) fail(`--wait ${args.values.wait}: want a number of seconds > 0`, EXIT.usage);

const fileOp = { op, path };
if (op !== "delete") {
  const bytes = data === undefined || data === "-" ? readFileSync(0) : Buffer.from(data, "utf8");
  try {
    fileOp.data = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    fileOp.data_b64 = bytes.toString("base64"); // not UTF-8: send the bytes as base64
  }
}

try {
  const d = await discover(store);
  if (!d) throw new ScribeError(`no daemon serves ${store}`, EXIT.noDaemon);
  const job = { v: 1, id, store: d.store_id, ops: [fileOp], submitted: new Date().toISOString() };
  let nc;
  try {
    nc = await connectDaemon(d);
  } catch (err) {
    throw new ScribeError(`cannot reach the daemon at ${d.url}: ${err.message}`, EXIT.busy);
  }
  let out;
  try {
    out = await submit(nc, d, job, { waitMs: waitSeconds * 1000 });
  } finally {
    await nc.close();
  }
  console.log(JSON.stringify(out, null, 2));
  if (out.status !== "applied") fail(`job ${out.id} rejected (${out.reason}): ${out.detail}`, EXIT.rejected);
  process.exit(EXIT.applied);
} catch (err) {
  fail(err.message, err instanceof ScribeError ? err.exitCode : EXIT.rejected);
}
