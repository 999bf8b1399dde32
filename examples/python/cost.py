#!/usr/bin/env python3
"""Measure what a call of scribe_client costs: each one runs a scribe process.

Usage: python3 cost.py [--scribe PATH] [--runs N]

On a temporary store, it times N calls of each kind, interleaved, and prints
the median and the 90th percentile in milliseconds: with a daemon serving the
store (``scribe serve``, started here) and without one (direct writes),
beside a bare ``scribe version`` process (the start-up every call pays).
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scribe_client as sc  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--scribe", default="scribe", help="the scribe binary (default: on PATH)")
    p.add_argument("--runs", type=int, default=50)
    a = p.parse_args()
    binary = shutil.which(a.scribe)
    if binary is None:
        sys.exit(f"cost.py: no scribe binary {a.scribe!r}")
    tmp = tempfile.mkdtemp(prefix="scribe-cost-")
    try:
        return measure(binary, tmp, a.runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(binary: str, tmp: str, runs: int) -> int:
    served, bare = os.path.join(tmp, "served"), os.path.join(tmp, "direct")
    os.mkdir(served)
    os.mkdir(bare)
    daemon = subprocess.Popen([binary, "serve", "--store", served], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        s = sc.Store(served, scribe=binary, route="require")
        d = sc.Store(bare, scribe=binary, route="direct")
        deadline = time.monotonic() + 10
        while True:  # the daemon announces itself within 10 s
            try:
                s.apply(sc.Op.append("warm.txt", "x\n"))
                break
            except sc.NoDaemon:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        d.apply(sc.Op.append("warm.txt", "x\n"))
        calls = {
            "scribe version (a process start)": lambda i: subprocess.run([binary, "version"], stdout=subprocess.DEVNULL),
            "daemon: Store.apply (append)": lambda i: s.apply(sc.Op.append("log.txt", "line %d\n" % i)),
            "daemon: Store.submit (append)": lambda i: s.submit(sc.Op.append("log.txt", "line %d\n" % i)),
            "daemon: Store.status": lambda i: s.status("nosuch"),
            "direct: Store.apply (append)": lambda i: d.apply(sc.Op.append("log.txt", "line %d\n" % i)),
            "direct: Store.status": lambda i: d.status("nosuch"),
        }
        times = {k: [] for k in calls}
        for i in range(runs):
            for name, call in calls.items():
                t0 = time.perf_counter()
                call(i)
                times[name].append((time.perf_counter() - t0) * 1000)
        print(f"{'call':36} {'p50 ms':>7} {'p90 ms':>7}   ({runs} runs each, interleaved)")
        for name, ts in times.items():
            ts.sort()
            print(f"{name:36} {statistics.median(ts):7.1f} {ts[int(len(ts) * 0.9) - 1]:7.1f}")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
