// A scribe client in Node.js, with nats.js 2.x: what docs/protocol.md asks
// of a client in any language, and nothing more. submit.mjs and lookup.mjs
// are its command lines.
//
// Linux: the daemon-lock probe runs flock(1) from util-linux, since Node
// has no flock(2) of its own.

import { spawnSync } from "node:child_process";
import { createHash, randomBytes, X509Certificate } from "node:crypto";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { checkServerIdentity } from "node:tls";

import { connect, StringCodec } from "nats";

const sc = StringCodec();

// Exit codes, as scribe's own (docs/cli.md).
export const EXIT = { applied: 0, rejected: 1, usage: 2, noDaemon: 69, busy: 75 };

// A failure with the exit code it deserves.
export class ScribeError extends Error {
  constructor(message, code = EXIT.rejected) {
    super(message);
    this.exitCode = code;
  }
}

// Store ID (section 2): the first 16 hex digits of SHA-256 of the store's
// real path, every symlink resolved.
export function storeId(store) {
  return createHash("sha256").update(realpathSync(store)).digest("hex").slice(0, 16);
}

// daemonAlive reports whether some process holds <store>/.scribe/daemon.lock
// (section 1): a non-blocking exclusive flock that, if it gets the lock,
// lets go at once (flock(1) runs `true` under it). The file is never
// created here.
export function daemonAlive(store) {
  const lock = join(store, ".scribe", "daemon.lock");
  if (!existsSync(lock)) return false;
  const r = spawnSync("flock", ["--nonblock", "--conflict-exit-code", "75", lock, "true"]);
  if (r.error) throw new ScribeError(`probe ${lock}: flock(1) is needed (util-linux): ${r.error.message}`);
  if (r.status === 75) return true; // held: a daemon serves the store
  if (r.status === 0) return false; // we got it, and let go: no daemon
  throw new ScribeError(`probe ${lock}: flock exited ${r.status}: ${String(r.stderr).trim()}`);
}

// discover returns the live daemon's discovery file, or null when no daemon
// serves the store. While the lock is held but the file is missing, not
// parseable or for another store, the daemon is starting (or stuck): it
// retries for up to 10 s, then fails.
export async function discover(store) {
  const sid = storeId(store);
  const deadline = Date.now() + 10_000;
  while (daemonAlive(store)) {
    try {
      const d = JSON.parse(readFileSync(join(store, ".scribe", "daemon.json"), "utf8"));
      if (d.store_id === sid) return d;
    } catch {
      // a starting daemon writes it only once it is ready
    }
    if (Date.now() > deadline) {
      throw new ScribeError("daemon.lock is held but daemon.json is unusable", EXIT.busy);
    }
    await sleep(100);
  }
  return null;
}

// connectDaemon connects to the daemon d names (section 1): TLS before
// anything else (handshakeFirst: the first bytes sent are a TLS
// ClientHello, and nothing the server says is read before it has proved
// itself), its certificate as the only CA, host names checked, the
// certificate's SHA-256 compared with tls_cert_sha256, and no reconnect on
// trust. A server that is not the daemon gets no CONNECT and no password.
export async function connectDaemon(d) {
  const pinned = new X509Certificate(d.tls_cert).fingerprint256.replaceAll(":", "").toLowerCase();
  if (pinned !== d.tls_cert_sha256) {
    throw new ScribeError("daemon.json's tls_cert and tls_cert_sha256 disagree", EXIT.noDaemon);
  }
  return connect({
    servers: d.url,
    user: d.user,
    pass: d.password,
    tls: {
      handshakeFirst: true, // the daemon takes TLS-first clients only
      ca: d.tls_cert, // replaces the default CAs: only the daemon's certificate
      checkServerIdentity(host, cert) {
        const err = checkServerIdentity(host, cert);
        if (err) return err;
        const got = cert.fingerprint256.replaceAll(":", "").toLowerCase();
        if (got !== d.tls_cert_sha256) return new Error(`server presented certificate ${got}, daemon.json names ${d.tls_cert_sha256}`);
        return undefined;
      },
    },
    reconnect: false, // a lost connection means: run discovery again
    timeout: 10_000, // a daemon that is stopped (SIGSTOP) never completes the handshake
  });
}

// newJobId is a fresh job ID: 128 random bits, unguessable.
export function newJobId() {
  return randomBytes(16).toString("hex");
}

// goJSON is exec args as the job digest hashes them: JSON as Go writes it,
// which JSON.stringify matches once lone surrogates are U+FFFD and <, >, &,
// U+2028 and U+2029 are escaped.
function goJSON(args) {
  return JSON.stringify(args.map((a) => a.toWellFormed())).replace(
    /[<>&\u2028\u2029]/g,
    (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"),
  );
}

// jobDigest is the job digest (section 8, "Job digest"): what the job asks
// for, apart from its id.
export function jobDigest(job) {
  const h = createHash("sha256");
  const ns = (b) => {
    const buf = typeof b === "string" ? Buffer.from(b, "utf8") : b;
    h.update(`${buf.length}:`);
    h.update(buf);
    h.update(",");
  };
  ns("scribe-job-1");
  if (job.coalesce) ns("coalesce:" + job.coalesce);
  for (const op of job.ops) {
    ns(op.op);
    if (op.op === "exec") {
      ns(op.name);
      ns(op.dir ?? "");
      ns(String(op.timeout_ms ?? 0));
      ns(goJSON(op.args ?? []));
      continue;
    }
    ns(op.path);
    ns(op.if_match ?? "");
    ns(op.data_b64 !== undefined ? Buffer.from(op.data_b64, "base64") : (op.data ?? ""));
  }
  const meta = job.meta ?? {};
  for (const k of Object.keys(meta).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))) {
    ns(k);
    ns(meta[k]);
  }
  return "sha256:" + h.digest("hex");
}

// judge says what out means for job (section 8, rule 8): the outcome to
// report, or null if it is not this job's outcome (a stray or forged
// message, or someone else's conflict notice).
export function judge(out, job, digest) {
  if (!out || typeof out !== "object" || out.v !== 1 || out.id !== job.id) return null;
  if (out.status !== "applied" && out.status !== "rejected") return null;
  if (!out.digest || out.digest === digest) return out;
  if (out.reason === "id_conflict") return null;
  return {
    v: 1, id: job.id, status: "rejected", reason: "id_conflict",
    detail: "the id was already used by a different job", digest,
  };
}

// lookup asks the status service for a job's recorded outcome (section 7).
// It returns the service's answer ({found, outcome, pruned_before, error}),
// or null if the daemon did not answer in time.
export async function lookup(nc, sid, id, timeout = 2_000) {
  try {
    const m = await nc.request(`scribe.${sid}.status`, sc.encode(id), { timeout });
    return JSON.parse(sc.decode(m.data));
  } catch (err) {
    if (err.code === "TIMEOUT" || err.code === "503") return null; // no answer: ask again later
    throw err;
  }
}

// Queue-full and too-big publish errors (section 4). nats.js 2.x reports
// both "no responders" and a full queue as code "503": only the JetStream
// API error (err.api_error) tells them apart.
const JS_STORE_FAILED = 10077; // "maximum messages exceeded", "maximum bytes exceeded"
const JS_MSG_TOO_BIG = 10054; // "message size exceeds maximum allowed"

// submit queues job on the daemon's store through nc and waits, up to
// waitMs, for its outcome: the outcome message if one for this job
// arrives, else the status service's record. A job whose outcome is not
// known in time fails with exit 75: submit it again with the same ID.
export async function submit(nc, d, job, { waitMs = 60_000 } = {}) {
  const sid = d.store_id;
  const payload = JSON.stringify(job);
  const digest = jobDigest(job);
  const deadline = Date.now() + waitMs;
  const late = () => new ScribeError(`job ${job.id}: no outcome yet; it may still be queued: look it up, or submit it again with --id ${job.id}`, EXIT.busy);
  const unknown = (err) => new ScribeError(`job ${job.id}: fate unknown (${err.message}): submit it again with --id ${job.id}`, EXIT.busy);

  // 1. Subscribe BEFORE publishing, or the outcome can pass unseen. On
  //    one connection the SUB goes out before the PUB.
  const sub = nc.subscribe(`scribe.${sid}.outcomes.${job.id}`);
  const outcomes = sub[Symbol.asyncIterator]();
  try {
    // 2. JetStream publish, Nats-Msg-Id = job ID. Fate unknown (timeout,
    //    no responders): publish the same bytes with the same ID again.
    let ack;
    for (;;) {
      try {
        ack = await nc.jetstream().publish(`scribe.${sid}.jobs`, payload, {
          msgID: job.id,
          expect: { streamName: `SCRIBE_${sid}` },
          timeout: 5_000,
        });
        break;
      } catch (err) {
        const api = err.api_error;
        if (api?.err_code === JS_STORE_FAILED && api.description?.startsWith("maximum")) {
          throw new ScribeError(`queue full (${api.description}); nothing was queued`, EXIT.busy);
        }
        if (api?.err_code === JS_MSG_TOO_BIG) {
          throw new ScribeError(`job ${job.id} is too big (${api.description}); nothing was queued`);
        }
        if (api) throw new ScribeError(`job ${job.id}: publish refused: ${api.description} (${api.err_code})`);
        if (err.code !== "TIMEOUT" && err.code !== "503") throw unknown(err);
        if (Date.now() > deadline) throw late();
        await sleep(500);
      }
    }

    // 3. The outcome message, or the journal's record. A duplicate was
    //    dropped by JetStream: its outcome may be gone already, ask now.
    if (ack.duplicate) {
      const out = judge((await lookup(nc, sid, job.id))?.outcome, job, digest);
      if (out) return out;
    }
    let pending = outcomes.next();
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) throw late();
      const timer = sleep(Math.min(2_000, left));
      const next = await Promise.race([pending, timer]);
      timer.cancel();
      if (next) {
        if (next.done) throw unknown(new Error("the connection closed"));
        pending = outcomes.next();
        let out;
        try {
          out = JSON.parse(sc.decode(next.value.data));
        } catch {
          continue; // not JSON: not an outcome
        }
        if ((out = judge(out, job, digest))) return out;
        continue;
      }
      // Nothing for 2 s: outcomes are at most once; the journal is the
      // source of truth.
      const out = judge((await lookup(nc, sid, job.id))?.outcome, job, digest);
      if (out) return out;
    }
  } finally {
    sub.unsubscribe();
  }
}

// sleep resolves to undefined after ms; cancel() ends it early (unresolved).
function sleep(ms) {
  let t;
  const p = new Promise((resolve) => {
    t = setTimeout(resolve, ms);
  });
  p.cancel = () => clearTimeout(t);
  return p;
}
