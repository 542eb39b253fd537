#!/usr/bin/env python3
"""Dispatch throughput: N runs of `true` under a cap of 16, queued to terminal, against a plain
`xargs -P16` fan-out of the same N commands (the floor: nothing recorded).

Usage: bench/dispatch.py [--runs 2000] [--repeat 3] [--fleet target/release/fleet]
Prints medians and the ratio. Build first: cargo build --release -p fleet

This is measure 1 of the whole suite (bench/suite.py, which also runs pueue), alone.
"""
import argparse, os, statistics, sys

sys.dont_write_bytecode = True  # no bench/__pycache__ from the import below
from suite import fleet_drain, kill_everything, xargs_drain


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fleet", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "fleet"))
    a = ap.parse_args()
    if not os.access(a.fleet, os.X_OK):
        sys.exit(f"error: no fleet binary at {a.fleet}: build it with `cargo build --release -p fleet`")
    xs, fs = [], []
    try:
        for _ in range(a.repeat):
            xs.append(xargs_drain(a.runs))
            fs.append(fleet_drain(os.path.abspath(a.fleet), a.runs))
    finally:
        kill_everything()
    x, f = statistics.median(xs), statistics.median(fs)
    print(f"xargs -P16: median {x:.2f} s  {xs}")
    print(f"fleet cap 16: median {f:.2f} s  {fs}")
    print(f"ratio fleet/xargs: {f / x:.2f}")


if __name__ == "__main__":
    main()
