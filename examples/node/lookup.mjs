#!/usr/bin/env node
// lookup.mjs asks a store's daemon, through its status service, for a job's
// recorded outcome.
//
//   node lookup.mjs STORE JOB_ID
//
// It prints the outcome as JSON and exits 0 when one is recorded, applied
// or rejected (check its status). It prints the service's answer and exits
// 1 when none is recorded (yet): the job may still be queued, be unknown,
// or have been pruned. 2 usage, 69 no daemon serves the store, 75 the
// daemon did not answer, or could not read its journal: ask again.

import { connectDaemon, discover, EXIT, lookup, ScribeError } from "./scribe.mjs";

function fail(message, code) {
  console.error(`lookup.mjs: ${message}`);
  process.exit(code);
}

const [store, id, ...rest] = process.argv.slice(2);
if (!store || !id || rest.length > 0) fail("usage: node lookup.mjs STORE JOB_ID", EXIT.usage);

try {
  const d = await discover(store);
  if (!d) throw new ScribeError(`no daemon serves ${store}`, EXIT.noDaemon);
  let nc;
  try {
    nc = await connectDaemon(d);
  } catch (err) {
    throw new ScribeError(`cannot reach the daemon at ${d.url}: ${err.message}`, EXIT.busy);
  }
  let l;
  try {
    l = await lookup(nc, d.store_id, id, 5_000);
  } finally {
    await nc.close();
  }
  if (!l) throw new ScribeError("the status service did not answer", EXIT.busy);
  if (l.error) throw new ScribeError(`the daemon could not read its journal: ${l.error}`, EXIT.busy);
  // Accept only an outcome for this very ID (section 9).
  if (l.found && l.outcome?.v === 1 && l.outcome.id === id) {
    console.log(JSON.stringify(l.outcome, null, 2));
    process.exit(0);
  }
  console.log(JSON.stringify(l, null, 2));
  const pruned = l.pruned_before ? `, or recorded before ${l.pruned_before} and pruned` : "";
  fail(`job ${id}: no outcome recorded (still queued, or unknown${pruned})`, EXIT.rejected);
} catch (err) {
  fail(err.message, err instanceof ScribeError ? err.exitCode : EXIT.rejected);
}
