#!/usr/bin/env python3
"""Dispatch throughput: N runs of `true` under a cap of 16, queued to terminal, against a plain
`xargs -P16` fan-out of the same N commands (the floor: nothing recorded).

Usage: bench/dispatch.py [--runs 2000] [--repeat 3] [--fleet target/release/fleet]
Prints medians and the ratio. Build first: cargo build --release -p fleet
"""
import argparse, os, sqlite3, statistics, subprocess, tempfile, time

def xargs(n):
    t = time.monotonic()
    subprocess.run(f"seq 1 {n} | xargs -P16 -n1 true", shell=True, check=True)
    return time.monotonic() - t

def fleet(binary, n, projects=32, cap=16):
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as d:
        cfg = os.path.join(d, "fleet.toml")
        with open(cfg, "w") as f:
            f.write(f'max_concurrency = {cap}\ntick = "1h"\n')
            for p in range(projects):
                f.write(f'[projects.p{p}]\ncommand = ["true"]\n')
        db = os.path.join(d, ".fleet", "fleet.db")
        # Queue every run first (not timed): one `fleet enqueue` creates the database, the rest
        # go in one transaction through sqlite3, like any other writer of the database.
        subprocess.run([binary, "--config", cfg, "enqueue", "p0"], check=True, capture_output=True)
        con = sqlite3.connect(db)
        now = int(time.time() * 1000)
        con.executemany(
            "INSERT INTO runs (project, namespace, status, trigger, enqueued_at) VALUES (?, 'default', 'queued', 'manual', ?)",
            [(f"p{i % projects}", now) for i in range(1, n)])
        con.commit()
        t = time.monotonic()
        daemon = subprocess.Popen([binary, "--config", cfg, "daemon"], stderr=subprocess.DEVNULL)
        try:
            while True:
                left = con.execute("SELECT COUNT(*) FROM runs WHERE status IN ('queued','starting','running')").fetchone()[0]
                if left == 0:
                    break
                time.sleep(0.02)
            elapsed = time.monotonic() - t
            bad = con.execute("SELECT COUNT(*) FROM runs WHERE status != 'succeeded'").fetchone()[0]
            assert bad == 0, f"{bad} runs did not succeed"
        finally:
            daemon.terminate()
            daemon.wait()
        return elapsed

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fleet", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "fleet"))
    a = ap.parse_args()
    xs, fs = [], []
    for _ in range(a.repeat):
        xs.append(xargs(a.runs))
        fs.append(fleet(a.fleet, a.runs))
    x, f = statistics.median(xs), statistics.median(fs)
    print(f"xargs -P16: median {x:.2f} s  {xs}")
    print(f"fleet cap 16: median {f:.2f} s  {fs}")
    print(f"ratio fleet/xargs: {f / x:.2f}")

if __name__ == "__main__":
    main()
