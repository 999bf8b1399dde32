#!/usr/bin/env python3
"""mine: a stand-in for a tool's "mine" command, run by tests/exec_test.go
through scribe's exec allowlist (and once directly).

Like the tools scribe was made for, it takes a lock of its own the way
their mine_palace_lock does:

    fd = open(lockpath, 'w'); fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

and on BlockingIOError prints "already running" and exits BUSY (75).
Holding it, it appends lines to LOG, each written whole (O_APPEND):

    attempt JOB EPOCH NS PID      before it tries its lock
    busy    JOB EPOCH NS PID      its lock was held: it exits 75
    start   JOB EPOCH NS PID [wing=W]
    end     JOB EPOCH NS PID

JOB and EPOCH are $SCRIBE_JOB_ID and $SCRIBE_EPOCH ("-" when unset), NS
the wall clock in nanoseconds. The other options make it misbehave in the
ways the tests need.
"""
import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import time

BUSY = 75


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--lock", required=True, help="the tool's own lock file")
    p.add_argument("--log", required=True, help="the file to append lines to")
    p.add_argument("--sleep", type=float, default=0, help="seconds to work, holding the lock")
    p.add_argument("--child", help="start a grandchild (sleep 60) and write its pid to this file")
    p.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (the grandchild inherits it)")
    p.add_argument("--spew", type=int, default=0, help="write this many bytes to stdout, a quarter of it to stderr")
    p.add_argument("--env", help="write environment, cwd, argv and open fds as JSON to DIR/JOB.json")
    p.add_argument("--probe-store-lock", action="store_true", help="open the store lock anew and try to flock it")
    p.add_argument("--scribe", help="scribe binary: run a direct submit from inside the command")
    p.add_argument("--say", help="print 'out: SAY' to stdout and 'err: SAY' to stderr")
    p.add_argument("--exit", type=int, default=0, help="exit with this code after the end line")
    p.add_argument("--wing", help="job argument, recorded in the start line")
    p.add_argument("--full", action="store_true", help="job argument")
    p.add_argument("--note", help="job argument, recorded verbatim by --env")
    a = p.parse_args()

    job = os.environ.get("SCRIBE_JOB_ID", "-")
    epoch = os.environ.get("SCRIBE_EPOCH", "-")

    def line(kind: str, *more: str) -> None:
        words = [kind, job, epoch, str(time.time_ns()), str(os.getpid()), *more]
        fd = os.open(a.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (" ".join(words) + "\n").encode())
        finally:
            os.close(fd)

    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    line("attempt")
    lock = open(a.lock, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        line("busy")
        print("already running", file=sys.stderr)
        return BUSY

    line("start", *([f"wing={a.wing}"] if a.wing else []))
    if a.say:
        print(f"out: {a.say}", flush=True)
        print(f"err: {a.say}", file=sys.stderr, flush=True)
    if a.spew:
        spew(sys.stdout.buffer, a.spew, b"BEGIN", b"END\n")
        spew(sys.stderr.buffer, a.spew // 4, b"EBEGIN", b"EEND\n")
    if a.child:
        child = subprocess.Popen(["sleep", "60"])
        with open(a.child + ".tmp", "w") as f:
            f.write(str(child.pid))
        os.rename(a.child + ".tmp", a.child)
    if a.env:
        record(a, job)
    if a.sleep:
        time.sleep(a.sleep)
    line("end")
    return a.exit


def spew(out, n: int, head: bytes, tail: bytes) -> None:
    """Write exactly n bytes: head, filler, tail."""
    out.write(head)
    left = n - len(head) - len(tail)
    chunk = b"x" * (1 << 20)
    while left > 0:
        k = min(left, len(chunk))
        out.write(chunk[:k])
        left -= k
    out.write(tail)
    out.flush()


def record(a, job: str) -> None:
    """Write what the command sees to a.env/JOB.json."""
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[name] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass  # the listing's own descriptor, closed by now
    rec = {"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv, "fds": fds, "note": a.note}
    if a.probe_store_lock:
        # A new open file description of the store lock: the daemon's hold
        # (handed down as fd 3) excludes it like any other process.
        path = os.environ.get("SCRIBE_LOCK_FILE", "")
        with open(path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                rec["store_lock_new_open"] = "free"
                fcntl.flock(f, fcntl.LOCK_UN)
            except BlockingIOError:
                rec["store_lock_new_open"] = "busy"
    if a.scribe:
        store = os.environ.get("SCRIBE_STORE", "")
        # subprocess closes every descriptor but 0-2 unless told: hand the
        # store lock's on, or the submit cannot join the hold.
        fd = int(os.environ["SCRIBE_LOCK_FD"])
        r = subprocess.run(
            # The default route, with --wait: inside the hold, the submit
            # writes under it instead of queueing behind the running job.
            [a.scribe, "submit", "--store", store, "--wait=10s", "--id", job + "-direct",
             "append", "joined.txt", f"joined {job}\n"],
            capture_output=True, text=True, pass_fds=(fd,))
        rec["submit"] = {"code": r.returncode, "stdout": r.stdout, "stderr": r.stderr}
    tmp = os.path.join(a.env, job + ".json.tmp")
    with open(tmp, "w") as f:
        json.dump(rec, f)
    os.rename(tmp, os.path.join(a.env, job + ".json"))


if __name__ == "__main__":
    sys.exit(main())
