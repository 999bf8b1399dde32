#!/usr/bin/env python3
"""mine: a tool's "mine", as docs/exec.md's worked example has it, run by
test_scribe_client.py as the exec command ``mine`` of a daemon's allowlist.

It takes its own lock the way the AI-memory tools' mine_palace_lock does
(a non-blocking flock, "already running" and exit 75 when it is held), then
appends a line to LOG (outside the store) and records what it mined in the
store itself, through scribe_client with the direct route: inside an exec
run it joins the daemon's hold of the store (descriptor 3), so that write
is applied at once, under the run's epoch.

    attempt JOB EPOCH PID   before it tries its lock
    busy    JOB EPOCH PID   its lock was held: it exits 75
    start   JOB EPOCH PID   it holds its lock
"""
import argparse
import fcntl
import os
import sys

BUSY = 75


def mine_palace_lock(path):
    """Take the mine's own lock, or say "already running" and exit busy."""
    fd = open(path, "w")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fd.close()
        print("already running", file=sys.stderr)
        sys.exit(BUSY)
    return fd


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lock", required=True, help="the mine's own lock file")
    p.add_argument("--log", required=True, help="a file outside the store to append lines to")
    p.add_argument("--client", required=True, help="the folder of scribe_client.py")
    p.add_argument("--scribe", required=True, help="the scribe binary")
    a = p.parse_args()
    job = os.environ.get("SCRIBE_JOB_ID", "-")
    epoch = os.environ.get("SCRIBE_EPOCH", "-")

    def line(kind):
        fd = os.open(a.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, ("%s %s %s %d\n" % (kind, job, epoch, os.getpid())).encode())
        finally:
            os.close(fd)

    line("attempt")
    try:
        lock = mine_palace_lock(a.lock)
    except SystemExit:
        line("busy")
        raise
    line("start")
    sys.path.insert(0, a.client)
    import scribe_client

    store = scribe_client.Store(os.environ["SCRIBE_STORE"], scribe=a.scribe, route="direct")
    out = store.apply(scribe_client.Job([scribe_client.Op.append("palace/mined.log", "mined by %s\n" % job)],
                                        id=job + "-mined"))
    print("mined: epoch %d" % out.epoch)
    lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
