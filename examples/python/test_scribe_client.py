"""Tests of scribe_client against real scribe processes.

Run from the repository's root:

    python3 -m unittest discover -s examples/python -v

The scribe binaries are built once, with ``go build``, into a temporary folder,
unless $SCRIBE_BIN names one. Every test makes its own store in a temporary
folder and starts the daemons it needs (``scribe serve``), which it stops,
or kills, itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Callable, Dict, Iterator, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import scribe_client as sc  # noqa: E402

# Bounds of the waits below, from scribe's own settings: a client gives a
# daemon 10 s to announce itself (autostart) and to connect (docs/cli.md),
# and a daemon lets the store lock go 500 ms after its last batch
# (serve --idle-release); a wait for either is given several times that.
DAEMON_UP = 10.0
SETTLE = 10.0

_bin: Dict[str, str] = {}


def setUpModule() -> None:
    given = os.environ.get("SCRIBE_BIN")
    if given:
        _bin["path"] = os.path.abspath(given)
        return
    tmp = tempfile.mkdtemp(prefix="scribe-py-bin-")
    _bin["tmp"] = tmp
    _bin["path"] = os.path.join(tmp, "scribe")
    # scribe and, beside it, scribed: the daemon's binary, which serve and
    # autostart run.
    r = subprocess.run(["go", "build", "-o", tmp + os.sep, "./cmd/scribe", "./cmd/scribed"], cwd=ROOT,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("go build ./cmd/scribe ./cmd/scribed failed:\n" + r.stderr)


def tearDownModule() -> None:
    if "tmp" in _bin:
        shutil.rmtree(_bin["tmp"], ignore_errors=True)


def scribe_bin() -> str:
    return _bin["path"]


def eventually(cond: Callable[[], object], within: float, what: str) -> object:
    """Poll cond until it returns something true, at most within seconds."""
    deadline = time.monotonic() + within
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        time.sleep(0.02)


def line_job(jid: str) -> sc.Job:
    """The job that appends the line "line JID": the same job for the same
    ID, whoever builds it."""
    return sc.Job([sc.Op.append("log.txt", f"line {jid}\n")], id=jid)


def lock_held(path: str) -> bool:
    """Whether some process holds a flock on path (probed, never kept)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def submits_running(store: str) -> bool:
    """Whether a scribe submit of store runs (the client's own processes)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"submit" in argv and ("--store=" + store).encode() in argv:
                return True
    return False


@contextlib.contextmanager
def flocked(path: str, within: float = SETTLE) -> Iterator[int]:
    """Hold an exclusive flock on path, as a Python direct writer of the
    store would (fcntl.flock), taking it as soon as it is free."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        def take() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False
        eventually(take, within, f"flock {path}")
        yield fd
    finally:
        os.close(fd)


class Daemon:
    """A ``scribe serve`` process of a store."""

    def __init__(self, store: str, log: str, *args: str) -> None:
        self.store = store
        self.log = open(log, "ab")
        self.proc = subprocess.Popen([scribe_bin(), "serve", "--store", store, *args],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        eventually(self._announced, DAEMON_UP, f"scribe serve --store {store} to announce itself:\n{self.tail()}")

    def _announced(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"scribe serve exited {self.proc.returncode}:\n{self.tail()}")
        try:
            with open(os.path.join(self.store, ".scribe", "daemon.json")) as f:
                return json.load(f).get("pid") == self.proc.pid
        except (OSError, ValueError):
            return False

    def tail(self) -> str:
        with open(self.log.name, errors="replace") as f:
            return "".join(f.readlines()[-20:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)

    def kill(self) -> None:
        """SIGKILL, the crash no shutdown code sees."""
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        self.stop()
        self.log.close()


class StoreCase(unittest.TestCase):
    """A test with a store of its own, in a temporary folder."""

    def setUp(self) -> None:
        # The store is a folder of a temporary folder of its own, so that
        # what lies beside it is this test's alone.
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="scribe-py-"))
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        self.dir = os.path.join(self.root, "store")
        os.mkdir(self.dir)
        self.addCleanup(self.kill_autostarted)

    def store(self, **kw) -> sc.Store:
        return sc.Store(self.dir, scribe=scribe_bin(), **kw)

    def daemon(self, *args: str) -> Daemon:
        d = Daemon(self.dir, os.path.join(self.root, "serve-%d.log" % len(os.listdir(self.root))), *args)
        self.addCleanup(d.close)
        return d

    def kill_autostarted(self) -> None:
        """Kill the daemons some submit started (autostart) for the stores
        in this test's folder, if they still run."""
        for name in os.listdir(self.root):
            meta = os.path.join(self.root, name, ".scribe")
            lock = os.path.join(meta, "daemon.lock")
            if not os.path.isdir(meta) or not lock_held(lock):
                continue
            with open(os.path.join(meta, "daemon.json")) as f:
                pid = json.load(f)["pid"]
            os.kill(pid, signal.SIGTERM)
            eventually(lambda: not lock_held(lock), SETTLE, f"daemon {pid} to exit")

    def file(self, name: str) -> Optional[bytes]:
        try:
            with open(os.path.join(self.dir, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def lines(self, name: str = "log.txt") -> List[str]:
        return (self.file(name) or b"").decode().splitlines()

    @property
    def store_lock(self) -> str:
        return os.path.join(self.dir, ".scribe", "lock")

    def first_write(self) -> None:
        """Make the store's .scribe folder and journal with a direct write."""
        self.store(route="direct").apply(sc.Op.put("first.txt", "first\n"))


# ---------------------------------------------------------------- jobs


class JobTest(StoreCase):
    def test_wire(self) -> None:
        j = sc.Job([sc.Op.put("./a.txt", "é\n", if_match="absent"), sc.Op.append("b.bin", b"\xff\x00"),
                    sc.Op.merge("c.json", {"k": None, "z": [1]}), sc.Op.delete("d"),
                    ], id="w-1", meta={"by": "test"})
        self.assertEqual(j.wire(), {"v": 1, "id": "w-1", "meta": {"by": "test"}, "ops": [
            {"op": "put", "path": "a.txt", "data": "é\n", "if_match": "absent"},
            {"op": "append", "path": "b.bin", "data_b64": "/wA="},
            {"op": "merge", "path": "c.json", "data": '{"k":null,"z":[1]}'},
            {"op": "delete", "path": "d"}]})
        x = sc.Job([sc.Op.exec("mine", "--wing=notes", dir="palace", timeout_ms=1000)], id="x", coalesce="mine")
        self.assertEqual(x.wire(), {"v": 1, "id": "x", "coalesce": "mine", "ops": [
            {"op": "exec", "name": "mine", "args": ["--wing=notes"], "dir": "palace", "timeout_ms": 1000}]})
        self.assertEqual(sc.Job.from_wire(j.wire()), j)
        self.assertEqual(sc.Job.from_wire(x.wire()), x)
        self.assertNotEqual(sc.Job([]).id, sc.Job([]).id, "each job gets a new ID")

    def test_digest_vectors(self) -> None:
        # docs/protocol.md's two vectors (Go's queue.Job.Digest).
        self.assertEqual(sc.Job([sc.Op.append("notes.txt", "hello")]).digest(),
                         "sha256:87b4e1910ce0315d615f0ea93360f15240676c9cf7d04aff52f3487b4c5bb0c5")
        self.assertEqual(sc.Job([sc.Op.exec("mine", "--wing=notes", "--full")], coalesce="mine").digest(),
                         "sha256:22e07db4941096887928af93074c7332daf7d76cd31a666e428442c119e48b47")

    def test_digest_is_the_recorded_one(self) -> None:
        store = self.store(route="direct")
        jobs = [
            sc.Job([sc.Op.append("./n.txt", "hello")]),
            sc.Job([sc.Op.append("././n2.txt", "hello")]),  # trimmed here as the command trims it again
            sc.Job([sc.Op.put("bin/x", b"\x00\xff\xfe"), sc.Op.merge("m.json", {"a": "<&>"})],
                   meta={"é": "v", "a": "\u2028", "B": "x"}),
            sc.Job([sc.Op.delete("n.txt", if_match="absent")]),  # rejected: recorded all the same
        ]
        for j in jobs:
            try:
                out = store.apply(j)
            except sc.Rejected as e:
                out = e.outcome
            self.assertEqual(out.digest, j.digest(), j)

    def test_text_that_is_not_utf8_is_refused_before_anything_runs(self) -> None:
        with self.assertRaisesRegex(ValueError, "UTF-8"):
            sc.Op.append("a.txt", "\ud800")
        for job in (sc.Job([sc.Op.append("\udcff", "x")]), sc.Job([sc.Op.exec("mine", "\ud800")]),
                    sc.Job([sc.Op.append("a", "x")], meta={"k": "\ud800"})):
            with self.assertRaisesRegex(ValueError, "UTF-8"):
                self.store().apply(job)
        self.assertFalse(os.path.exists(os.path.join(self.dir, ".scribe")), "nothing ran")

    def test_a_dict_is_decoded_as_strictly_as_the_daemon_decodes_it(self) -> None:
        put = {"op": "put", "path": "owner.txt", "data": "bob\n"}
        for bad, says in [
            ({"ops": [dict(put, if_mach="absent")]}, "ops[0]: unknown field 'if_mach'"),
            ({"ops": [put], "metadata": {"by": "me"}}, "unknown field 'metadata'"),
            ({"ops": [dict(put, name="mine")]}, "ops[0]: 'put' ops have no 'name'"),
            ({"ops": [{"op": "exec", "name": "mine", "path": "x"}]}, "ops[0]: 'exec' ops have no 'path'"),
            ({"ops": [{"op": "exec", "name": "mine", "timeout_ms": 0}]}, "ops[0].timeout_ms: 0, want more"),
            ({"ops": [{"op": "exec", "name": "mine", "timeout_ms": "5"}]}, "want an integer, not a string"),
            ({"ops": [{"op": "exec", "name": "mine", "timeout_ms": True}]}, "want an integer, not a boolean"),
            ({"ops": [{"op": "exec", "name": "mine", "args": ["a", 1]}]}, "ops[0].args[1]: want a string"),
            ({"ops": [dict(put, data_b64="Ym9i")]}, "both data and data_b64"),
            ({"ops": [{"op": "put", "path": "a", "data_b64": "%%"}]}, "data_b64: not base64"),
            ({"ops": [dict(put, if_match="")]}, "ops[0].if_match: empty"),
            ({"ops": [dict(put, if_match=5)]}, "ops[0].if_match: want a string, not a number"),
            ({"ops": [put], "meta": {"by": 1}}, "meta"),
            ({"ops": [put], "v": 2}, "version 1"),
            ({"ops": [put], "submitted": "yesterday"}, "job.submitted: 'yesterday' is not an RFC 3339 time"),
            ({"ops": [put], "priority": ""}, "job.priority: empty"),
            ({"ops": [put], "coalesce": ""}, "job.coalesce: empty"),
            ({"ops": [{"op": "exec", "name": "mine", "dir": ""}]}, "ops[0].dir: empty"),
            ({"ops": [{"op": "exec", "name": "mine", "path": ""}]}, "'exec' ops have no 'path'"),
            ({"ops": [put], "\ufb06ore": "x"}, "unknown field"),  # no full folding, as Go
            ({"ops": [put], "submitted": ""}, "job.submitted: '' is not an RFC 3339 time"),
            ({"ops": [put], "submitted": "2023-02-29T00:00:00Z"}, "not an RFC 3339 time"),
            ({"ops": [{"op": "exec", "name": "mine", "timeout_ms": 10**30}]}, "more than a Go time.Duration holds"),
            ({"ops": put}, "want an array"),
            ({"id": "x"}, "no 'ops'"),
        ]:
            with self.assertRaises(ValueError, msg=bad) as cm:
                sc.Job.from_wire(bad)
            self.assertIn(says, str(cm.exception), bad)
        # Through a Store too, before anything runs: the typo does not
        # become a put without its precondition.
        with self.assertRaisesRegex(ValueError, "if_mach"):
            self.store().apply({"ops": [dict(put, if_mach="absent")]})
        self.assertFalse(os.path.exists(os.path.join(self.dir, ".scribe")), "nothing ran")
        # null is absent, as it is to the daemon.
        j = sc.Job.from_wire({"v": 1, "id": "n-1", "ops": [dict(put, if_match=None, data_b64=None)], "meta": None})
        self.assertEqual(j, sc.Job([sc.Op.put("owner.txt", "bob\n")], id="n-1"))
        # What the daemon takes, this takes: names in any case, line breaks
        # in base64, Go's RFC 3339 (a fraction after a comma).
        j = sc.Job.from_wire({"ID": "n-2", "Ops": [{"OP": "put", "Path": "owner.txt", "data_b64": "Ym9i\nCg=="}],
                              "submitted": "2026-11-29T23:04:12,5+01:00"})
        self.assertEqual(j, sc.Job([sc.Op.put("owner.txt", "bob\n")], id="n-2"))
        store = self.store(route="direct")
        out = store.apply({"Id": "n-3", "ops": [{"op": "put", "PATH": "case.txt", "data": "x", "name": None}]})
        self.assertEqual((out.id, out.status, self.file("case.txt")), ("n-3", "applied", b"x"))

    def test_a_builder_takes_bytes_or_str_only(self) -> None:
        for data in (5, True, [104, 105], 1.5):
            with self.assertRaisesRegex(TypeError, "data must be bytes or str"):
                sc.Op.put("a", data)
        self.assertEqual(sc.Op.put("a", bytearray(b"hi")).data, b"hi")

    def test_a_builder_refuses_an_empty_if_match(self) -> None:
        h = ""  # a hash read into a variable that stayed empty
        for build in (lambda: sc.Op.put("a", "x", if_match=h), lambda: sc.Op.append("a", "x", if_match=h),
                      lambda: sc.Op.merge("a", {"k": 1}, if_match=h), lambda: sc.Op.delete("a", if_match=h)):
            with self.assertRaisesRegex(ValueError, "if_match: empty"):
                build()
        self.assertNotIn("if_match", sc.Op.put("a", "x").wire(), "no precondition by default")

    def test_a_job_bound_to_another_store_is_not_applied_here(self) -> None:
        store = self.store(route="direct")
        with self.assertRaises(sc.Rejected) as cm:
            store.apply({"store": "0123456789abcdef", "ops": [{"op": "put", "path": "a.txt", "data": "x"}]})
        self.assertEqual(cm.exception.reason, "wrong_store")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "a.txt")))
        own = hashlib.sha256(os.path.realpath(self.dir).encode()).hexdigest()[:16]
        store.apply({"store": own, "ops": [{"op": "put", "path": "a.txt", "data": "x"}]})
        with open(os.path.join(self.dir, "a.txt")) as f:
            self.assertEqual(f.read(), "x")

    def test_no_binary(self) -> None:
        with self.assertRaisesRegex(FileNotFoundError, "scribe binary"):
            sc.Store(self.dir, scribe=os.path.join(self.dir, "nope"))


class RouteTest(StoreCase):
    def test_submit_queues_through_a_daemon_and_writes_directly_without(self) -> None:
        store = self.store()
        r = store.submit(line_job("alone"))
        self.assertEqual((r.id, r.queued, r.outcome.status, r.outcome.mode), ("alone", False, "applied", "direct"))
        self.daemon()
        r = store.submit(line_job("served"))
        self.assertEqual((r.id, r.queued, r.outcome), ("served", True, None))
        out = store.wait(line_job("served"))
        self.assertEqual((out.status, out.mode), ("applied", "daemon"))
        self.assertEqual(store.status("served").outcome.raw, out.raw)
        listed = store.jobs(state="applied")
        self.assertEqual([o.id for o in listed.outcomes], ["served", "alone"])
        self.assertEqual(store.report()["daemon"]["pid"], listed.daemon_pid)
        self.assertEqual(self.lines(), ["line alone", "line served"])


def readme_example() -> Tuple[str, str]:
    """The README's example and the output it shows."""
    with open(os.path.join(HERE, "README.md")) as f:
        text = f.read()
    part = text[text.index("## Example"):]
    code = part[part.index("```python\n") + len("```python\n"):]
    code = code[:code.index("```\n")]
    out = part[part.index("```console\n") + len("```console\n"):]
    out = out[:out.index("```\n")]
    return code, out


class ReadmeTest(StoreCase):
    def test_the_example_runs_as_written(self) -> None:
        code, shown = readme_example()
        want = shown.split("\n", 1)[1]  # after the command line
        bindir = os.path.join(self.root, "bin")  # scribe on PATH, by that name
        os.mkdir(bindir)
        os.symlink(scribe_bin(), os.path.join(bindir, "scribe"))
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], TMPDIR=self.root)
        with open(os.path.join(self.root, "example.py"), "w") as f:
            f.write(code)
        shutil.copy(os.path.join(HERE, "scribe_client.py"), self.root)
        r = subprocess.run([sys.executable, "example.py"], cwd=self.root, env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(r.stdout, want)


# ---------------------------------------------------------- exactly once


def _worker(args: Tuple[str, str, str, List[str]]) -> Dict[str, Tuple[str, int, str, int]]:
    """Apply every ID's line job, retrying on Busy (the direct route fails
    fast) with the same job; return each ID's outcome as seen here."""
    binary, store, route, ids = args
    s = sc.Store(store, scribe=binary, route=route)
    seen = {}
    for jid in ids:
        job = line_job(jid)
        for _ in range(10000):
            try:
                out = s.apply(job)
                break
            except sc.Busy:
                continue  # fail-fast: not now; the same job again
        else:
            raise AssertionError(f"{jid}: busy 10000 times")
        seen[jid] = (out.status, out.seq, out.at, out.epoch)
    return seen


class ExactlyOnceTest(StoreCase):
    PROCS = 4
    JOBS = 12

    def run_workers(self, route: str) -> None:
        ids = [[f"p{p}-j{i}" for i in range(self.JOBS)] for p in range(self.PROCS)]
        # Each process applies its own IDs, then retries the next one's,
        # which that process may not have applied yet: the same IDs race
        # from two processes.
        work = [(scribe_bin(), self.dir, route, ids[p] + ids[(p + 1) % self.PROCS]) for p in range(self.PROCS)]
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(self.PROCS) as pool:
            results = pool.map(_worker, work)
        want = sorted(f"line {jid}" for p in ids for jid in p)
        self.assertEqual(sorted(self.lines()), want, "each line exactly once")
        by_id: Dict[str, set] = {}
        for seen in results:
            for jid, out in seen.items():
                self.assertEqual(out[0], "applied", jid)
                by_id.setdefault(jid, set()).add(out)
        for jid, outs in by_id.items():
            self.assertEqual(len(outs), 1, f"{jid}: a recorded outcome never changes: {outs}")

    def test_through_the_daemon(self) -> None:
        self.daemon()
        self.run_workers("require")
        self.assertEqual(self.store().jobs(limit=1000).queued_total, 0)

    def test_direct_without_a_daemon(self) -> None:
        self.run_workers("prefer")


# ------------------------------------------------------------------ busy


class BusyTest(StoreCase):
    def setUp(self) -> None:
        super().setUp()
        self.first_write()

    @contextlib.contextmanager
    def let_go_if_waited_for(self, let_go: Callable[[], None]) -> Iterator[threading.Event]:
        """Call let_go as soon as a direct writer waits for the store lock:
        one that waits marks its demand (a shared flock on .scribe/demand).
        A writer that fails fast never does, and never gets in."""
        demand = os.path.join(self.dir, ".scribe", "demand")
        seen, stop = threading.Event(), threading.Event()

        def watch() -> None:
            while not stop.is_set():
                if lock_held(demand):
                    seen.set()
                    let_go()
                    return
                stop.wait(0.005)

        t = threading.Thread(target=watch)
        t.start()
        try:
            yield seen
        finally:
            stop.set()
            t.join()

    def assert_busy_and_unchanged(self, store: sc.Store, let_go: Callable[[], None]) -> None:
        job = line_job("busy-1")
        with self.let_go_if_waited_for(let_go) as waited:
            with self.assertRaises(sc.Busy) as cm:
                store.apply(job)
        self.assertFalse(waited.is_set(), "the write waited for the lock")
        e = cm.exception
        self.assertEqual(e.exit_code, 75)
        self.assertIn("store is busy", e.message)
        self.assertIn(self.store_lock, e.message)
        self.assertTrue(e.hint, "the command says how to wait")
        self.assertNotIsInstance(e, sc.FateUnknown)
        self.assertIsNone(self.file("log.txt"), "nothing written")
        self.assertEqual(store.status(job).state, "unknown", "nothing recorded")

    def test_direct_route_while_python_holds_the_lock(self) -> None:
        with flocked(self.store_lock) as fd:
            self.assert_busy_and_unchanged(self.store(route="direct"), lambda: fcntl.flock(fd, fcntl.LOCK_UN))

    def test_prefer_route_without_a_daemon_fails_fast(self) -> None:
        with flocked(self.store_lock) as fd:
            self.assert_busy_and_unchanged(self.store(), lambda: fcntl.flock(fd, fcntl.LOCK_UN))

    def test_direct_route_while_flock1_holds_the_lock(self) -> None:
        if shutil.which("flock") is None:
            self.skipTest("flock(1) (util-linux) is not installed")
        # Its own process group, so that the sleep it runs (which keeps the
        # lock's descriptor) goes with it.
        holder = subprocess.Popen(["flock", self.store_lock, "sleep", "600"], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(holder.wait)
        self.addCleanup(_killpg, holder.pid)
        eventually(lambda: lock_held(self.store_lock), SETTLE, "flock(1) to take the lock")
        self.assert_busy_and_unchanged(self.store(route="direct"), lambda: _killpg(holder.pid))
        self.assertIsNone(holder.poll(), "the holder still holds it")

    def test_lock_wait_waits_for_the_lock(self) -> None:
        store = self.store(route="direct", lock_wait=SETTLE)
        done: List[sc.Outcome] = []
        with flocked(self.store_lock):
            t = threading.Thread(target=lambda: done.append(store.apply(line_job("waited"))))
            t.start()
            # A direct writer that waits marks its demand (a shared flock
            # on .scribe/demand) for the daemon to honour.
            demand = os.path.join(self.dir, ".scribe", "demand")
            eventually(lambda: lock_held(demand), SETTLE, "the direct write to wait for the lock")
            self.assertEqual(done, [])
        t.join()
        self.assertEqual(done[0].status, "applied")
        self.assertEqual(self.lines(), ["line waited"])


# -------------------------------------------------------------- rejected


class RejectedTest(StoreCase):
    def test_precondition_failed(self) -> None:
        self.daemon()
        store = self.store()
        store.apply(sc.Op.put("owner.txt", "alice\n"))
        job = sc.Job([sc.Op.put("owner.txt", "mallory\n", if_match="absent")])
        with self.assertRaises(sc.Rejected) as cm:
            store.apply(job)
        e = cm.exception
        self.assertEqual((e.exit_code, e.reason, e.job_id), (1, "precondition_failed", job.id))
        self.assertIn("if_match wants it absent", e.detail)
        self.assertEqual(e.outcome.status, "rejected")
        self.assertEqual(e.outcome.digest, job.digest())
        self.assertEqual(self.file("owner.txt"), b"alice\n", "nothing changed")
        # The ID is used up: the same job gets the same recorded rejection.
        with self.assertRaises(sc.Rejected) as again:
            store.apply(job)
        self.assertEqual(again.exception.outcome.raw, e.outcome.raw)
        st = store.status(job)
        self.assertEqual((st.state, st.outcome.raw), ("rejected", e.outcome.raw))

    def test_too_large_is_refused_before_it_is_sent(self) -> None:
        store = self.store(route="direct")
        for size in (2 << 20, 40 << 20):  # over the store's limit; over any job's
            with self.assertRaises(sc.Rejected, msg=size) as cm:
                store.apply(sc.Op.put("big", b"x" * size))
            self.assertEqual(cm.exception.reason, "too_large", size)
            self.assertIsNone(cm.exception.outcome, "refused before it was sent")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "big")))

    def test_path_escape(self) -> None:
        self.daemon()
        store = self.store()
        before = sorted(os.listdir(self.root))
        for path in ("../escape.txt", "/etc/escape.txt", ".scribe/lock", "a//b"):
            job = sc.Job([sc.Op.put(path, "x")])
            with self.assertRaises(sc.Rejected, msg=path) as cm:
                store.apply(job)
            self.assertEqual(cm.exception.reason, "path_escapes", path)
            self.assertIsNone(cm.exception.outcome, "refused before it was sent")
            self.assertEqual(store.status(job).state, "unknown", path)
        self.assertEqual(sorted(os.listdir(self.root)), before, "nothing written beside the store")
        self.assertFalse(os.path.exists("/etc/escape.txt"))
        self.assertEqual(sorted(os.listdir(self.dir)), [".scribe"])

    def test_id_conflict(self) -> None:
        self.daemon()
        store = self.store()
        first = store.apply(sc.Job([sc.Op.append("a.txt", "one\n")], id="same"))
        other = sc.Job([sc.Op.append("a.txt", "two\n")], id="same")
        for call in (store.apply, store.submit, store.wait):
            with self.assertRaises(sc.Rejected, msg=call.__name__) as cm:
                call(other)
            self.assertEqual(cm.exception.reason, "id_conflict", call.__name__)
        self.assertEqual(store.status(other).outcome.reason, "id_conflict")
        self.assertEqual(store.status("same").outcome.raw, first.raw, "the first outcome stands")
        self.assertEqual(self.file("a.txt"), b"one\n")

    def test_usage_and_no_daemon(self) -> None:
        with self.assertRaises(sc.UsageError) as cm:
            self.store(lock_file=os.path.join(self.dir, "no", "such", "lock")).apply(sc.Op.append("a", "b"))
        self.assertEqual(cm.exception.exit_code, 2)
        with self.assertRaises(sc.NoDaemon) as nd:
            self.store(route="require").apply(sc.Op.append("a", "b"))
        self.assertEqual(nd.exception.exit_code, 69)
        with self.assertRaises(sc.NoDaemon):
            self.store(autostart=False).submit(sc.Op.exec("mine"))  # exec jobs run only in a daemon
        with self.assertRaises(ValueError):
            self.store(route="sometimes")
        with self.assertRaises(sc.Failed) as f:
            sc.Store(os.path.join(self.dir, "missing"), scribe=scribe_bin()).apply(sc.Op.append("a", "b"))
        self.assertIn("does not exist", f.exception.message)
        self.assertIsNone(self.file("a"))


# ---------------------------------------------------------- fate unknown


class FateUnknownTest(StoreCase):
    def setUp(self) -> None:
        super().setUp()
        self.first_write()

    def test_retry_after_the_daemon_was_killed_applies_once(self) -> None:
        d = self.daemon()
        job = line_job("k-1")
        with flocked(self.store_lock):
            # The daemon cannot take the store: the job waits in its queue.
            with self.assertRaises(sc.FateUnknown) as cm:
                self.store(retries=0).apply(job, timeout=1.0)
            self.assertEqual(cm.exception.job_id, job.id)
            self.assertEqual(self.store().status(job).state, "queued")
            d.kill()
        # Jobs a killed daemon left queued: the prefer route will not write
        # past them, and a require route has no daemon; nothing is redone.
        with self.assertRaises(sc.Busy):
            self.store().apply(job)
        with self.assertRaises(sc.NoDaemon):
            self.store(route="require").apply(job)
        self.assertEqual(self.lines(), [])
        # The retry that starts a daemon gets it applied, once.
        out = self.store(autostart=True).apply(job)
        self.assertEqual((out.status, out.mode), ("applied", "daemon"))
        self.assertEqual(self.store(autostart=True).apply(job).raw, out.raw, "a retry gets the recorded outcome")
        self.assertEqual(self.lines(), ["line k-1"])

    def test_apply_retries_with_the_same_id(self) -> None:
        d = self.daemon()
        job = line_job("k-2")
        log = logging.getLogger(f"scribe-test-{id(self)}")
        log.propagate = False
        retries: List[str] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                retries.append(record.getMessage())

        log.addHandler(Keep())
        store = self.store(retries=3, autostart=True, logger=log)
        result: List[object] = []
        t = threading.Thread(target=lambda: result.append(self._apply(store, job)))
        with flocked(self.store_lock):
            t.start()
            eventually(lambda: self.store().status(job).state == "queued", SETTLE, "the job to be queued")
            d.kill()
            eventually(lambda: retries, SETTLE, "apply to try again")
        t.join()
        out = result[0]
        self.assertIsInstance(out, sc.Outcome, out)
        self.assertEqual(out.status, "applied")
        self.assertIn("trying again with the same ID", retries[0])
        self.assertEqual(self.lines(), ["line k-2"])

    @staticmethod
    def _apply(store: sc.Store, job: sc.Job) -> object:
        try:
            return store.apply(job, timeout=1.0)
        except sc.ScribeError as e:
            return e

    def test_keyboard_interrupt_stops_the_scribe_process(self) -> None:
        self.daemon()
        with flocked(self.store_lock):
            code = ("import sys; sys.path.insert(0, %r); import scribe_client as sc\n"
                    "s = sc.Store(%r, scribe=%r)\n"
                    "print('ready', flush=True)\n"
                    "try:\n"
                    "    s.apply(sc.Job([sc.Op.append('log.txt', 'x\\n')], id='kbd'))\n"
                    "except KeyboardInterrupt:\n"
                    "    print('interrupted', flush=True); sys.exit(3)\n") % (HERE, self.dir, scribe_bin())
            p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            self.assertEqual(p.stdout.readline(), "ready\n")
            eventually(lambda: self.store().status("kbd").state == "queued", SETTLE, "the job to be queued")
            p.send_signal(signal.SIGINT)
            out, _ = p.communicate(timeout=SETTLE + sc.INTERRUPT_GRACE)
            self.assertEqual((p.returncode, out), (3, "interrupted\n"))
            self.assertFalse(submits_running(self.dir), "no scribe submit left running")


# ------------------------------------------------------------ the mine


def _load_mine():
    spec = importlib.util.spec_from_file_location("mine", os.path.join(HERE, "testdata", "mine.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


class MineTest(StoreCase):
    """A tool's mine, queued as an exec job, and the tool's own lock."""

    def setUp(self) -> None:
        super().setUp()
        self.tool = os.path.join(self.root, "tool")
        os.mkdir(self.tool)
        self.mine_lock = os.path.join(self.tool, "mine.lock")
        self.mine_log = os.path.join(self.tool, "mine.log")
        meta = os.path.join(self.dir, ".scribe")
        os.makedirs(os.path.join(self.dir, "palace"))
        os.mkdir(meta)
        os.chmod(meta, 0o700)
        args = [os.path.join(HERE, "testdata", "mine.py"), "--lock", self.mine_lock, "--log", self.mine_log,
                "--client", HERE, "--scribe", scribe_bin()]
        config = ("[exec.mine]\nprogram = %s\nargs = %s\ntimeout = \"60s\"\nbusy_exit_codes = [75]\nlock_file = %s\n"
                  % (json.dumps(sys.executable), json.dumps(args), json.dumps(self.mine_lock)))
        fd = os.open(os.path.join(meta, "config.toml"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(config)

    def mine_lines(self, kind: str) -> List[str]:
        try:
            with open(self.mine_log) as f:
                return [ln for ln in f.read().splitlines() if ln.startswith(kind + " ")]
        except FileNotFoundError:
            return []

    def test_queued_mine_defers_while_a_python_writer_holds_its_lock(self) -> None:
        self.daemon()
        store = self.store()
        mine = _load_mine()
        held = mine.mine_palace_lock(self.mine_lock)  # a mine run by hand, say
        try:
            hooks = [sc.Job([sc.Op.exec("mine")], id=f"hook-{i}", coalesce="mine") for i in range(3)]
            for job in hooks:
                receipt = store.submit(job)
                self.assertEqual((receipt.id, receipt.queued), (job.id, True))
            st = eventually(lambda: self._deferred(store, hooks[0]), SETTLE, "the job to be deferred")
            self.assertIn(self.mine_lock, st.detail)
            self.assertIn(self.mine_lock, store.report()["deferred"])
            self.assertEqual(self.mine_lines("start"), [], "the mine did not run while its lock was held")
        finally:
            held.close()  # let go
        outs = [store.wait(job, timeout=SETTLE) for job in hooks]
        self.assertEqual([o.status for o in outs], ["applied"] * 3)
        self.assertEqual(len(self.mine_lines("start")), 1, "one run for the three hooks")
        ran = next(o for o in outs if not o.coalesced_into)
        self.assertEqual(sorted(o.coalesced_into for o in outs if o.coalesced_into), [ran.id, ran.id])
        self.assertIn("mined: epoch", ran.exec["stdout"])
        # The mine wrote the store through the client, joining the run's hold.
        self.assertEqual(self.lines("palace/mined.log"), [f"mined by {ran.id}"])
        inner = store.status(f"{ran.id}-mined").outcome
        self.assertEqual((inner.mode, inner.epoch), ("direct", ran.epoch))
        self.assertEqual(ran.exec["stdout"], f"mined: epoch {ran.epoch}\n")

    def test_cancel_and_priority_while_a_mine_waits(self) -> None:
        """While a queued mine waits for its lock, a job queued behind it
        can be cancelled, and a high job overtakes the normal ones."""
        self.daemon()
        store = self.store(route="require")
        held = _load_mine().mine_palace_lock(self.mine_lock)
        try:
            gate = sc.Job([sc.Op.exec("mine")], id="gate")
            store.submit(gate)
            eventually(lambda: self._deferred(store, gate), SETTLE, "the mine to be deferred")
            normal = [line_job(f"n{i}") for i in range(3)]
            drop = line_job("drop")
            high = sc.Job([sc.Op.append("log.txt", "line h\n")], id="h", priority="high")
            self.assertEqual(high.wire()["priority"], "high")
            self.assertEqual(high.digest(), sc.Job(high.ops, id="h").digest(), "the priority is not in the digest")
            for job in (*normal, drop, high):
                self.assertTrue(store.submit(job).queued)
            out = store.cancel(drop)
            self.assertEqual((out.id, out.status, out.reason), ("drop", "rejected", "cancelled"))
            self.assertEqual(store.cancel(drop.id).raw, out.raw, "cancelling again: the same outcome")
            with self.assertRaises(sc.TooLate) as cm:
                store.cancel(gate)
            self.assertEqual(cm.exception.state, "in_hand")
            listed = store.jobs(state="queued").queued or []
            self.assertEqual([j["id"] for j in listed], ["gate", "h", "n0", "n1", "n2"], "in the order of decision")
            self.assertEqual(listed[1].get("priority"), "high")
        finally:
            held.close()  # let go
        for job in (gate, high, *normal):
            self.assertEqual(store.wait(job, timeout=SETTLE).status, "applied")
        self.assertEqual(self.lines(), ["line h", "line n0", "line n1", "line n2"])
        with self.assertRaises(sc.Rejected) as cm:
            store.wait(drop, timeout=SETTLE)
        self.assertEqual(cm.exception.reason, "cancelled")
        with self.assertRaises(sc.TooLate) as cm:
            store.cancel(high)
        self.assertEqual((cm.exception.state, cm.exception.outcome.status), ("applied", "applied"))
        with self.assertRaises(sc.TooLate) as cm:
            store.cancel("never-queued")
        self.assertEqual((cm.exception.state, cm.exception.exit_code), ("unknown", 1))

    @staticmethod
    def _deferred(store: sc.Store, job: sc.Job) -> Optional[sc.Status]:
        st = store.status(job)
        return st if st.state == "in_hand" and "deferred" in st.detail else None

    def test_python_writer_takes_the_store_lock_while_the_daemon_idles(self) -> None:
        self.daemon()
        store = self.store()
        store.apply(line_job("before"))
        eventually(lambda: store.report()["daemon"]["holding"] is False, SETTLE, "the daemon to let the lock go")
        # A direct write while the daemon idles gets in at once.
        out = self.store(route="direct").apply(line_job("direct"))
        self.assertEqual(out.mode, "direct")
        with flocked(self.store_lock, within=0):  # free: taken at the first try
            receipt = store.submit(line_job("queued"))
            self.assertTrue(receipt.queued)
            st = eventually(lambda: self._waits(store, "queued"), SETTLE, "the daemon to wait for the store")
            self.assertIn("store is busy", st.detail)
            with self.assertRaises(sc.Busy):
                self.store(route="direct").apply(line_job("refused"))
            self.assertEqual(self.lines(), ["line before", "line direct"])
        out = store.wait("queued", timeout=SETTLE)
        self.assertEqual(out.status, "applied")
        self.assertEqual(self.lines(), ["line before", "line direct", "line queued"])

    @staticmethod
    def _waits(store: sc.Store, jid: str) -> Optional[sc.Status]:
        st = store.status(jid)
        return st if st.state == "queued" and "waits for the store" in st.detail else None


# ------------------------------------------------ exit codes, one by one


class ExitCodeTest(StoreCase):
    """How each answer of the command maps to a value or an exception,
    with a stand-in scribe that answers as told."""

    def fake(self, code: int, stdout: str = "", stderr: str = "") -> sc.Store:
        path = os.path.join(self.dir, "fake-scribe")
        with open(path, "w") as f:
            f.write("#!/bin/sh\ncat >/dev/null\nprintf '%%s' %s\nprintf '%%s' %s >&2\nexit %d\n"
                    % (_sh(stdout), _sh(stderr), code))
        os.chmod(path, 0o755)
        return sc.Store(self.dir, scribe=path, retries=0)

    def test_submit_answers(self) -> None:
        job = sc.Job([sc.Op.append("a", "b")], id="j")
        cases = [
            (75, "", "scribe: wait timed out: job j queued, outcome not yet known: context deadline exceeded\n",
             sc.FateUnknown),
            (75, "", "scribe: wait timed out: job j: whether it was queued is unknown; retry with the same ID: x\n",
             sc.FateUnknown),
            (75, "", "scribe: store is busy: lock L is held by an unknown process\nscribe: retry\n", sc.Busy),
            (75, "", "scribe: queue full: maximum messages exceeded\n", sc.Busy),
            (69, "", "scribe: S: no daemon serves this store\n", sc.NoDaemon),
            (2, "", "scribe: unknown route\n", sc.UsageError),
            (130, "", "scribe: interrupted: job j may still be applied; see its outcome with: …\n", sc.Interrupted),
            (1, "", "scribe: rejected (too_large): job is 3145900 bytes encoded, limit 1048576\n", sc.Rejected),
            (1, "", "scribe: job j rejected (id_conflict): job id j was already used\n", sc.Rejected),
            (1, "", "scribe: refusing S/.scribe: it is writable by others\n", sc.Failed),
            (0, "not json", "", sc.Failed),
        ]
        for code, out, err, want in cases:
            with self.subTest(code=code, err=err):
                with self.assertRaises(want) as cm:
                    self.fake(code, out, err).apply(job)
                self.assertEqual(cm.exception.job_id, "j")
                self.assertEqual(cm.exception.exit_code, code)
                if err:
                    self.assertEqual(cm.exception.message, err.splitlines()[0][len("scribe: "):])
        with self.assertRaises(sc.Interrupted) as cm:
            self.fake(130, "", "scribe: interrupted: job j may still be applied\n").apply(job)
        self.assertTrue(cm.exception.may_be_applied)
        with self.assertRaises(sc.Rejected) as rj:
            self.fake(1, "", "scribe: rejected (path_escapes): op 0: path \"../x\" has a \"..\" segment\n").apply(job)
        self.assertEqual((rj.exception.reason, rj.exception.detail), ("path_escapes", 'op 0: path "../x" has a ".." segment'))

    def test_a_call_cut_short(self) -> None:
        path = os.path.join(self.dir, "slow-scribe")
        # Says it sent the job, as scribe does when interrupted after.
        with open(path, "w") as f:
            f.write("#!/bin/sh\ntrap 'echo \"scribe: interrupted: job j may still be applied\" >&2; exit 130' INT\n"
                    "cat >/dev/null\nwhile :; do sleep 0.01; done\n")
        os.chmod(path, 0o755)
        store = sc.Store(self.dir, scribe=path, retries=0)
        with self.assertRaises(sc.FateUnknown) as cm:
            store.apply(sc.Job([sc.Op.append("a", "b")], id="j"), timeout=0.2)
        self.assertIn("may still be applied", cm.exception.message)


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _sh(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    unittest.main()
