#!/usr/bin/env python3
"""fleet's benchmark suite: one command, every measure of docs/PERFORMANCE.md, one markdown table.

Usage (from anywhere; the repository is the one this file lives in):

    python3 bench/suite.py            # the whole suite: 3-4 minutes on 2 cores, ~9 the first time
    python3 bench/suite.py --tiny     # every measure at a tiny size, well under a minute (CI)

It builds fleet (`cargo build --release -p fleet`), runs each measure in a fresh temporary state
directory, and prints a table (measure, fleet's figure, the anchor's figure from the same run, the
ratio, the target, met or not) with the commit measured and the machine; the same table goes to
target/bench/results.md (raw figures to target/bench/results.json).

Measures:
  1. dispatch   N runs of `true` under a cap of 16, queued to terminal, against `xargs -P16` and
                pueue (installed from crates.io into target/bench-tools on first use); as
                context, bench/floor.c (built with gcc): the least one monitor process per run
                costs, bare, with fleet's file and syncs, with the file and no syncs, and with
                the syncs but no file per run (records in one shared journal).
  2. eval       the bench `cargo bench -p supervisor --bench eval` (EVAL cost at 1k, 10k, 100k
                queued): criterion's medians, one size after the other, read from
                target/criterion/eval/<N>/new/estimates.json (context), and the judged ratio
                from the same bench's interleaved rounds (eval-interleaved.json in the out dir).
  3. enqueue    per-call wall time of 500 sequential `fleet enqueue`, daemon running, with 0 and
                with 100k runs queued behind a full namespace cap; the daemon's RSS at 100k.
  4. idle       CPU share of an idle daemon (1,000 projects, nothing queued, 60 s, default tick).
  5. restart    `fleet daemon` start to its first claim, 10k rows in the database.
  6. scrape     `/metrics` of a daemon with 1,000 projects and 100k runs of history, and a drain
                of 2,000 runs scraped back to back against the same drain unscraped
                (bench/scrape.py).
  (7, claims while pruning, is a bench of its own: cargo bench -p supervisor --bench prune_claim.)
  8. hosts      on PostgreSQL (a throwaway server, found as the tests find it): N runs of `true`
                over three hosts against one host on SQLite, and the time per run of a drain
                with 100k runs queued behind a full cap against none (bench/hosts.py).

--tiny never judges a figure: it fails only when something breaks (exit 1 when a measure raised).
Nothing here sleeps to synchronise: every wait is a poll with a deadline. Every daemon, pueued and
process started on their behalf (found by a tag in their environment) is killed on the way out.
Python 3 standard library only.
"""
import argparse, json, math, os, platform, shutil, signal, sqlite3, statistics, subprocess
import sys, tempfile, time, traceback, uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# Every process the suite starts carries this variable; shims, commands and pueue's tasks inherit
# it, which is how cleanup finds the ones that outlive their parent (a shim outlives its daemon).
TAG_VAR = "FLEET_BENCH_SUITE_TAG"
TAG = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"

SIZES = {
    "full": dict(dispatch_runs=2000, pueue_runs=500, repeat=3, enqueue_calls=500, backlog=100_000,
                 backlog_projects=100, idle_projects=1000, idle_secs=60.0, restart_rows=10_000,
                 restart_queued=100, restart_reps=7, eval_sizes=None, eval_quick=False,
                 scrape_projects=1000, scrape_history=100_000, scrape_drain=2000,
                 hosts_runs=2000, hosts_claims=500, hosts_backlog=100_000),
    "tiny": dict(dispatch_runs=50, pueue_runs=20, repeat=1, enqueue_calls=20, backlog=1000,
                 backlog_projects=10, idle_projects=1000, idle_secs=2.0, restart_rows=1000,
                 restart_queued=20, restart_reps=2, eval_sizes="1000", eval_quick=True,
                 scrape_projects=100, scrape_history=2000, scrape_drain=50,
                 hosts_runs=50, hosts_claims=20, hosts_backlog=1000),
}


# The anchor is pinned, so that figures from different days compare the same pueue.
PUEUE_VERSION = "4.0.4"


class NotRun(Exception):
    """A measure that could not run for a reason outside fleet (no network, no bench yet)."""


# ---------------------------------------------------------------- processes and polling

STARTED = []  # every Popen the suite started, for the finally


def child_env(**extra):
    env = dict(os.environ)
    env[TAG_VAR] = TAG
    env.pop("FLEET_CONFIG", None)
    env.pop("FAILPOINTS", None)
    env.update(extra)
    return env


def popen(argv, **kw):
    kw.setdefault("env", child_env())
    kw.setdefault("start_new_session", True)  # a ^C to the suite reaches us, not them
    p = subprocess.Popen(argv, **kw)
    STARTED.append(p)
    return p


def stop(p, grace=10.0):
    """SIGTERM, wait up to `grace`, then SIGKILL."""
    if p.poll() is None:
        try:
            p.terminate()
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def tagged_pids():
    """Pids of live processes whose environment carries this run's tag (ours excluded)."""
    needle = f"{TAG_VAR}={TAG}".encode()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(name))
        except OSError:
            pass
    return pids


def kill_everything():
    """Stop every process this suite started, then SIGKILL whatever still carries the tag."""
    for p in STARTED:
        try:
            stop(p, grace=5.0)
        except Exception:
            pass
    STARTED.clear()
    for _ in range(3):
        pids = tagged_pids()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") and not zombie(p) for p in pids):
            time.sleep(0.01)


def zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def wait_for(cond, timeout, what, interval=0.01, alive=None):
    """Polls `cond()` every `interval` until it returns something truthy, which it returns.
    Raises TimeoutError naming `what` after `timeout` seconds, or RuntimeError if `alive` (a
    Daemon) died meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if alive is not None:
            alive.check()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def run(argv, timeout=600, **kw):
    kw.setdefault("env", child_env())
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"`{' '.join(map(str, argv))}` exited {r.returncode}: {(r.stderr or r.stdout).strip()[-2000:]}")
    return r.stdout


# ---------------------------------------------------------------- fleet helpers

class Fleet:
    """One fleet.toml in a fresh temporary folder, its database, and at most one daemon."""

    def __init__(self, binary, body, prefix="fleet-bench-"):
        self.binary = binary
        self.tmp = tempfile.TemporaryDirectory(prefix=prefix)
        self.dir = self.tmp.name
        self.cfg = os.path.join(self.dir, "fleet.toml")
        with open(self.cfg, "w") as f:
            f.write(body)
        self.state = os.path.join(self.dir, ".fleet")
        self.db_path = os.path.join(self.state, "fleet.db")
        self.log_path = os.path.join(self.dir, "daemon.log")
        self.daemon = None
        self._con = None

    def cli(self, *args, timeout=60):
        return run([self.binary, "--config", self.cfg, *args], timeout=timeout, cwd=self.dir)

    def enqueue(self, project, priority=0):
        return int(self.cli("enqueue", project, "--priority", str(priority)).strip())

    @property
    def con(self):
        if self._con is None:
            self._con = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
        return self._con

    def one(self, sql, *args):
        return self.con.execute(sql, args).fetchone()[0]

    def insert_queued(self, rows):
        """rows: (project, namespace). One transaction, like any other writer of the database."""
        now = int(time.time() * 1000)
        self.con.execute("BEGIN IMMEDIATE")
        self.con.executemany(
            "INSERT INTO runs (project, namespace, status, trigger, enqueued_at) VALUES (?, ?, 'queued', 'manual', ?)",
            [(p, ns, now) for p, ns in rows])
        self.con.execute("COMMIT")

    def start(self, env=None):
        self.logf = open(self.log_path, "ab")
        self.started_at = time.monotonic()
        self.daemon = popen([self.binary, "--config", self.cfg, "daemon"], cwd=self.dir,
                            stdout=self.logf, stderr=subprocess.STDOUT, env=env or child_env())
        return self.daemon

    def check(self):
        if self.daemon is not None and self.daemon.poll() is not None:
            raise RuntimeError(f"fleet daemon exited {self.daemon.returncode}; last log lines:\n{self.log_tail()}")

    def log_tail(self, n=15):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"

    def wait_up(self, timeout=30):
        """Until the daemon took the state directory over and answers on its socket."""
        sock = os.path.join(self.state, "daemon.sock")

        def up():
            if not os.path.exists(sock) or not os.path.exists(self.db_path):
                return False
            try:
                return self.one("SELECT pid FROM hosts ORDER BY epoch DESC LIMIT 1") == self.daemon.pid
            except (sqlite3.OperationalError, TypeError):
                return False
        wait_for(up, timeout, "the daemon to take the state directory over", alive=self)

    def stop(self):
        if self.daemon is not None:
            stop(self.daemon)
            self.daemon = None
            self.logf.close()

    def close(self):
        self.stop()
        # Shims outlive their daemon (that is their job): let those still running end before
        # their state directory is removed under them, or kill them if they take too long.
        try:
            wait_for(lambda: not [p for p in tagged_pids() if not zombie(p)], 30,
                     "the shims to exit")
        except TimeoutError:
            kill_everything()
        if self._con is not None:
            self._con.close()
            self._con = None
        self.tmp.cleanup()

    def pid_status(self, key):
        """A field of /proc/<daemon>/status in KiB (VmRSS, VmHWM)."""
        with open(f"/proc/{self.daemon.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        raise KeyError(key)


def cpu_ticks(pid):
    """utime + stime of the whole process (every thread, live or exited), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def ctx_switches(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


# ---------------------------------------------------------------- 1. dispatch

def xargs_drain(n):
    t = time.monotonic()
    subprocess.run(f"seq 1 {n} | xargs -P16 -n1 true", shell=True, check=True, env=child_env())
    return time.monotonic() - t


def floor_build(out_dir):
    """Compiles bench/floor.c (the floor of one monitor process per run) with gcc into
    `out_dir`; raises NotRun when gcc is missing or the build fails."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise NotRun("no gcc or cc to build bench/floor.c")
    exe = os.path.join(out_dir, "floor")
    r = subprocess.run([cc, "-O2", "-o", exe, os.path.join(REPO, "bench", "floor.c")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise NotRun(f"building bench/floor.c failed: {(r.stderr.strip().splitlines() or ['?'])[-1][:120]}")
    return exe


# bench/floor.c's modes, each with the row's words for what its monitor does per run.
FLOOR_MODES = (("bare", "a fork per run, nothing else"),
               ("durable", "a fork per run, a new file and three syncs (a run's, with a lock file per run)"),
               ("unsynced", "a fork per run, a new file, no sync"),
               ("shared", "a fork per run, no new file: a byte-range lock and two synced appends to one shared journal"))


def floor_drain(exe, n, mode):
    """Times bench/floor.c draining n runs of `true` at 16 parallel; `mode` is one of
    FLOOR_MODES (what each adds: bench/floor.c's header). Its files go in a fresh temporary
    folder, removed afterwards like a drain's state directory."""
    d = tempfile.mkdtemp(prefix="fleet-bench-floor-")
    try:
        t = time.monotonic()
        subprocess.run([exe, str(n), "16", mode, d], check=True, env=child_env())
        return time.monotonic() - t
    finally:
        shutil.rmtree(d, ignore_errors=True)


def fleet_drain(binary, n, projects=32, cap=16, timeout=600):
    """Queue n runs of `true` over `projects` projects with no daemon (not timed), then time
    `fleet daemon` from its start until nothing is queued or active. tick = 1h: every start
    follows an event-driven EVAL."""
    body = f'max_concurrency = {cap}\ntick = "1h"\n' + "".join(
        f'[projects.p{p}]\ncommand = ["true"]\n' for p in range(projects))
    f = Fleet(binary, body)
    try:
        f.enqueue("p0")  # creates the database; the rest go in one transaction
        f.insert_queued([(f"p{i % projects}", "default") for i in range(1, n)])
        f.start()
        t = f.started_at
        wait_for(lambda: f.one("SELECT COUNT(*) FROM runs WHERE status IN ('queued','starting','running')") == 0,
                 timeout, f"{n} runs to drain", interval=0.02, alive=f)
        elapsed = time.monotonic() - t
        bad = f.one("SELECT COUNT(*) FROM runs WHERE status != 'succeeded'")
        if bad:
            raise RuntimeError(f"{bad} of {n} runs did not succeed")
        return elapsed
    finally:
        f.close()


def pueue_bins(cache, install):
    """Paths of pueue and pueued under `cache`, installing them from crates.io if asked."""
    bins = (os.path.join(cache, "bin", "pueue"), os.path.join(cache, "bin", "pueued"))
    if all(os.access(b, os.X_OK) for b in bins):
        return bins
    if not install:
        raise NotRun("pueue not installed and --tiny/--no-pueue-install given")
    if shutil.which("cargo") is None:
        raise NotRun("cargo not found, cannot install pueue")
    os.makedirs(cache, exist_ok=True)
    log = os.path.join(cache, "pueue-install.log")
    print(f"  installing pueue into {cache} (once; log: {log}) ...", file=sys.stderr, flush=True)
    with open(log, "w") as lf:
        try:
            r = subprocess.run(["cargo", "install", "--locked", "--root", cache, "pueue",
                                "--version", PUEUE_VERSION],
                               stdout=lf, stderr=subprocess.STDOUT, timeout=1800)
        except subprocess.TimeoutExpired:
            raise NotRun("cargo install pueue took over 30 min")
    if r.returncode != 0 or not all(os.access(b, os.X_OK) for b in bins):
        with open(log, errors="replace") as lf:
            last = [l.strip() for l in lf if l.strip()][-1:] or ["?"]
        raise NotRun(f"cargo install pueue failed ({last[0][:120]})")
    return bins


class Pueue:
    """A pueued of our own: its own config, data, runtime and socket in a temporary folder, with
    HOME and XDG_* pointing there too, so the user's pueue is never touched."""

    def __init__(self, bins):
        self.pueue, self.pueued = bins
        self.tmp = tempfile.TemporaryDirectory(prefix="fleet-bench-pueue-")
        d = self.tmp.name
        for sub in ("home", "config", "data", "runtime", "cache"):
            os.makedirs(os.path.join(d, sub))
        self.cfg = os.path.join(d, "config", "pueue.yml")
        with open(self.cfg, "w") as f:
            f.write("shared:\n"
                    f"  pueue_directory: {d}/data\n"
                    f"  runtime_directory: {d}/runtime\n"
                    "  use_unix_socket: true\n"
                    f"  unix_socket_path: {d}/runtime/pueue.socket\n"
                    "daemon:\n"
                    "  default_parallel_tasks: 1\n"
                    "  callback: null\n")
        self.env = child_env(HOME=f"{d}/home", XDG_CONFIG_HOME=f"{d}/config", XDG_DATA_HOME=f"{d}/data",
                             XDG_RUNTIME_DIR=f"{d}/runtime", XDG_CACHE_HOME=f"{d}/cache",
                             PUEUE_CONFIG_PATH=self.cfg)
        self.log = open(os.path.join(d, "pueued.log"), "wb")
        self.daemon = popen([self.pueued, "-c", self.cfg], env=self.env, cwd=d,
                            stdout=self.log, stderr=subprocess.STDOUT)

        def up():
            if self.daemon.poll() is not None:
                raise RuntimeError(f"pueued exited {self.daemon.returncode}")
            return subprocess.run([self.pueue, "-c", self.cfg, "status", "--json"], env=self.env,
                                  capture_output=True).returncode == 0
        wait_for(up, 30, "pueued to answer", interval=0.05)

    def __call__(self, *args):
        return run([self.pueue, "-c", self.cfg, *args], env=self.env, timeout=60)

    def status(self):
        return json.loads(self("status", "--json"))

    def close(self):
        try:
            if self.daemon.poll() is None:
                subprocess.run([self.pueue, "-c", self.cfg, "shutdown"], env=self.env,
                               capture_output=True, timeout=10)
                self.daemon.wait(timeout=10)
        except Exception:
            pass
        stop(self.daemon)
        self.log.close()
        self.tmp.cleanup()


def pueue_task_done(task):
    """(done, succeeded) for one task of `pueue status --json`, across pueue 3 and 4 formats."""
    s = task.get("status")
    if isinstance(s, dict) and "Done" in s:
        inner = s["Done"]
        result = inner.get("result") if isinstance(inner, dict) else inner
        return True, result == "Success"
    if s == "Done":
        return True, task.get("result") == "Success"
    return False, False


def pueue_drain(bins, n, timeout=600):
    """n tasks of `true` in a group of 16 parallel, added while the group is paused (not timed);
    timed from `pueue start` until `pueue status --json` shows every task done."""
    p = Pueue(bins)
    try:
        p("group", "add", "bench", "--parallel", "16")
        p("pause", "--group", "bench")
        for _ in range(n):
            p("add", "--group", "bench", "--", "true")
        t = time.monotonic()
        p("start", "--group", "bench")

        def done():
            tasks = p.status()["tasks"].values()
            states = [pueue_task_done(x) for x in tasks]
            return len(states) == n and all(d for d, _ in states) and states
        states = wait_for(done, timeout, f"pueue to finish {n} tasks", interval=0.05)
        elapsed = time.monotonic() - t
        bad = sum(1 for _, ok in states if not ok)
        if bad:
            raise RuntimeError(f"{bad} of {n} pueue tasks did not succeed")
        return elapsed
    finally:
        p.close()


def measure_dispatch(a, sz, rows, raw):
    n, m, rep = sz["dispatch_runs"], sz["pueue_runs"], sz["repeat"]
    bins, why_not = None, None
    if a.no_pueue:
        why_not = "--no-pueue"
    else:
        try:
            bins = pueue_bins(a.tools, install=not (a.tiny or a.no_pueue_install))
            raw["pueue_version"] = run([bins[0], "--version"]).strip()
        except NotRun as e:
            why_not = str(e)
    try:
        floor, floor_why_not = floor_build(a.out_dir), None
    except NotRun as e:
        floor, floor_why_not = None, str(e)
    xs, fs, ps = [], [], []
    floors = {mode: [] for mode, _ in FLOOR_MODES}
    for i in range(rep):
        xs.append(xargs_drain(n))
        fs.append(fleet_drain(a.fleet, n))
        if floor:
            for mode, _ in FLOOR_MODES:
                floors[mode].append(floor_drain(floor, n, mode))
        if bins:
            ps.append(pueue_drain(bins, m))
        print(f"  dispatch {i + 1}/{rep}: xargs {xs[-1]:.2f} s, fleet {fs[-1]:.2f} s"
              + (", floor " + ", ".join(f"{ts[-1]:.2f} s {mode}" for mode, ts in floors.items()) if floor else "")
              + (f", pueue {ps[-1]:.2f} s ({m} runs)" if bins else ""), file=sys.stderr, flush=True)
    raw["dispatch"] = dict(runs=n, xargs_s=xs, fleet_s=fs, pueue_runs=m, pueue_s=ps,
                           **{f"floor_{mode}_s": ts for mode, ts in floors.items()})
    x, f = statistics.median(xs), statistics.median(fs)
    med = f"median of {rep}" if rep > 1 else "1 run"
    rows.append(dict(measure=f"drain {n:,} `true`, cap 16: wall time vs `xargs -P16`",
                     fleet=f"{f:.2f} s", anchor=f"xargs {x:.2f} s", ratio=f"{f / x:.2f}x", target="≤ 1.5x",
                     met=f / x <= 1.5, notes=f"{med}; fleet {fmt_list(fs, 's')}, xargs {fmt_list(xs, 's')}"))
    if floor:
        for mode, what in FLOOR_MODES:
            ts = floors[mode]
            t = statistics.median(ts)
            rows.append(dict(measure=f"floor of one monitor process per run (bench/floor.c: {what}; "
                                     f"its time in the fleet column), {n:,} `true`, 16 parallel, vs `xargs -P16`",
                             fleet=f"{t:.2f} s", anchor=f"xargs {x:.2f} s", ratio=f"{t / x:.2f}x",
                             target="— (context)", met=None, notes=f"{med}; {fmt_list(ts, 's')}"))
    else:
        rows.append(dict(measure="floor of one monitor process per run (bench/floor.c)", fleet="—",
                         anchor=f"not run: {floor_why_not}", ratio="—", target="— (context)",
                         met=None, notes=""))
    if bins:
        pp = statistics.median(ps)
        ft, pt = n / f, m / pp
        rows.append(dict(measure=f"dispatch throughput vs pueue (fleet {n:,} runs, pueue {m:,}, 16 parallel)",
                         fleet=f"{ft:.0f} runs/s", anchor=f"pueue {pt:.1f} runs/s", ratio=f"{ft / pt:.1f}x",
                         target="≥ 10x", met=ft / pt >= 10,
                         notes=f"{med}; pueue {fmt_list(ps, 's')} for {m} runs ({raw.get('pueue_version', '')})"))
    else:
        rows.append(dict(measure="dispatch throughput vs pueue", fleet="—", anchor=f"not run: {why_not}",
                         ratio="—", target="≥ 10x", met=None, notes=""))


# ---------------------------------------------------------------- 2. EVAL (criterion)

def cargo_target_dir():
    out = run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=REPO)
    return json.loads(out)["target_directory"]


def measure_eval(a, sz, rows, raw):
    sizes = (1000, 10_000, 100_000)
    bench = os.path.join(REPO, "crates", "supervisor", "benches", "eval.rs")
    if a.tiny and not a.eval_bench:
        rows.append(dict(measure="EVAL cost vs queue size (criterion)", fleet="—",
                         anchor="not run: skipped in --tiny (add --eval-bench)", ratio="—",
                         target="100k ≤ 1.1x 1k", met=None, notes=""))
        return
    if not os.path.exists(bench):
        rows.append(dict(measure="EVAL cost vs queue size (criterion)", fleet="—",
                         anchor="not run: crates/supervisor/benches/eval.rs is not in this tree yet",
                         ratio="—", target="100k ≤ 1.1x 1k", met=None, notes=""))
        return
    if sz["eval_sizes"]:
        sizes = tuple(int(s) for s in sz["eval_sizes"].split(","))
    crit = os.path.join(cargo_target_dir(), "criterion", "eval")
    log = os.path.join(a.out_dir, "eval-bench.log")
    open(log, "w").close()
    est, quick = {}, set()

    inter_path = os.path.join(a.out_dir, "eval-interleaved.json")
    inter = {}

    def bench(ns, quick_mode):
        """One `cargo bench` over the sizes `ns`; reads their criterion median estimates (ns),
        and, when `ns` is every size, the interleaved medians the same bench prints after
        criterion's (see the top of crates/supervisor/benches/eval.rs)."""
        argv = ["cargo", "bench", "-p", "supervisor", "--bench", "eval"] + (["--", "--quick"] if quick_mode else [])
        env = child_env(FLEET_BENCH_SIZES=",".join(map(str, ns)),
                        FLEET_BENCH_INTERLEAVED_OUT=inter_path)
        if os.path.exists(inter_path):
            os.unlink(inter_path)
        print(f"  FLEET_BENCH_SIZES={env['FLEET_BENCH_SIZES']} {' '.join(argv)} (log: {log}) ...",
              file=sys.stderr, flush=True)
        t0 = time.time()
        with open(log, "a") as lf:
            r = subprocess.run(argv, cwd=REPO, env=env, stdout=lf, stderr=subprocess.STDOUT, timeout=1800)
        if r.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` exited {r.returncode}; see {log}")
        for n in ns:
            path = os.path.join(crit, str(n), "new", "estimates.json")
            if not os.path.exists(path) or os.path.getmtime(path) < t0 - 1:
                raise RuntimeError(f"the bench ran but did not write {path}")
            with open(path) as f:
                est[n] = json.load(f)["median"]["point_estimate"]
            if quick_mode:
                quick.add(n)
        if tuple(ns) == tuple(sizes):
            if not os.path.exists(inter_path):
                raise RuntimeError(f"the bench ran but did not write {inter_path}")
            with open(inter_path) as f:
                for e in json.load(f):
                    inter[e["queued"]] = e

    # One run for every size: the interleaved rounds need every install at once. (An EVAL that
    # grew with the queue gets fewer criterion samples and rounds from the bench itself.)
    bench(sizes, sz["eval_quick"])
    raw["eval_ns"] = est
    raw["eval_interleaved"] = inter
    base = est[sizes[0]]
    for n in sizes[1:]:
        ratio = est[n] / base
        rows.append(dict(measure=f"EVAL cost, {n:,} queued vs {sizes[0]:,} (criterion median, one size after the other)",
                         fleet=fmt_ns(est[n]), anchor=f"{sizes[0]:,} queued: {fmt_ns(base)}",
                         ratio=f"{ratio:.2f}x", target="— (context)", met=None,
                         notes="criterion --quick" if n in quick else ""))
    # The judged figure: the same EVAL timed in rounds that visit every size, so that the disk's
    # drift between sizes (every EVAL ends with an fsync) lands on all of them alike.
    ibase = inter[sizes[0]]
    for n in sizes[1:]:
        e = inter[n]
        main = n == 100_000
        rows.append(dict(measure=f"EVAL cost, {n:,} queued vs {sizes[0]:,} (interleaved, median of {e['rounds']} rounds)",
                         fleet=fmt_ns(e["median_ns"]), anchor=f"{sizes[0]:,} queued: {fmt_ns(ibase['median_ns'])}",
                         ratio=f"{e['ratio_to_first']:.2f}x", target="≤ 1.1x" if main else "— (context)",
                         met=(e["ratio_to_first"] <= 1.1) if main else None,
                         notes="tiny: 20 rounds (--quick)" if sz["eval_quick"] else ""))
    if len(sizes) == 1:
        rows.append(dict(measure=f"EVAL cost, {sizes[0]:,} queued (criterion median)", fleet=fmt_ns(base),
                         anchor="—", ratio="—", target="—", met=None, notes="tiny: one size only"))


# ---------------------------------------------------------------- 3. enqueue + RSS

def enqueue_phase(a, backlog, projects, calls):
    """A namespace `held` (cap 1) is kept full by one `sleep` run, so its queued runs stay queued:
    every EVAL still reads the queue heads and packs, and claims nothing (a backlog behind a full
    cap). `backlog` queued runs over `projects` projects go in directly with sqlite3; then `calls`
    sequential `fleet enqueue q0` (also held) are timed one by one, daemon running."""
    body = ('[namespaces.held]\nmax_concurrency = 1\n'
            '[projects.blocker]\ncommand = ["sleep", "3600"]\nnamespace = "held"\n'
            + "".join(f'[projects.q{i}]\ncommand = ["true"]\nnamespace = "held"\n' for i in range(projects)))
    f = Fleet(a.fleet, body)
    try:
        blocker = f.enqueue("blocker", priority=10)  # creates the database; claimed first
        if backlog:
            f.insert_queued([(f"q{i % projects}", "held") for i in range(backlog)])
        f.start()
        f.wait_up()
        wait_for(lambda: f.one("SELECT status FROM runs WHERE id = ?", blocker) == "running", 30,
                 "the blocker run to be running", alive=f)
        for _ in range(5):  # warm-up, not timed
            f.cli("enqueue", "q0")
        times, cpu0 = [], cpu_ticks(f.daemon.pid)
        for _ in range(calls):
            t = time.perf_counter()
            f.cli("enqueue", "q0")
            times.append(time.perf_counter() - t)
        f.check()
        queued = f.one("SELECT COUNT(*) FROM runs WHERE status = 'queued'")
        if queued != backlog + 5 + calls:
            raise RuntimeError(f"{queued} runs queued, expected {backlog + 5 + calls}: the cap did not hold them")
        rss = dict(rss=f.pid_status("VmRSS"), hwm=f.pid_status("VmHWM"), queued=queued,
                   daemon_cpu_s=(cpu_ticks(f.daemon.pid) - cpu0) / os.sysconf("SC_CLK_TCK"), wall_s=sum(times))
        f.cli("cancel", str(blocker))
        wait_for(lambda: f.one("SELECT status FROM runs WHERE id = ?", blocker) == "cancelled", 30,
                 "the blocker run to end cancelled", alive=f)
        return times, rss
    finally:
        f.close()


def pct(xs, p):
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def measure_enqueue(a, sz, rows, raw):
    n, calls, projects = sz["backlog"], sz["enqueue_calls"], sz["backlog_projects"]
    t0, rss0 = enqueue_phase(a, 0, projects, calls)
    tn, rssn = enqueue_phase(a, n, projects, calls)
    raw["enqueue"] = dict(calls=calls, backlog=n, at0_s=t0, atN_s=tn, rss_at0_kib=rss0, rss_atN_kib=rssn)
    for name, fn in (("median", statistics.median), ("p99", lambda xs: pct(xs, 99))):
        v0, vn = fn(t0), fn(tn)
        rows.append(dict(measure=f"`fleet enqueue` wall time, {name} of {calls}, {n:,} queued vs 0",
                         fleet=f"{vn * 1e3:.2f} ms", anchor=f"0 queued: {v0 * 1e3:.2f} ms",
                         ratio=f"{vn / v0:.2f}x", target="≤ 1.2x", met=vn / v0 <= 1.2,
                         notes=("daemon running, default tick; backlog held by a full namespace cap; daemon CPU "
                                f"while they ran: {rss0['daemon_cpu_s']:.1f} s in {rss0['wall_s']:.1f} s at 0 queued, "
                                f"{rssn['daemon_cpu_s']:.1f} s in {rssn['wall_s']:.1f} s at {n:,}") if name == "median" else ""))
    for key, label in (("rss", "VmRSS"), ("hwm", "peak VmHWM")):
        v = rssn[key] / 1024
        rows.append(dict(measure=f"daemon memory with {rssn['queued']:,} queued ({label})", fleet=f"{v:.1f} MiB",
                         anchor="target 30 MiB", ratio=f"{v / 30:.2f}x", target="≤ 30 MiB", met=v <= 30,
                         notes=f"after {calls + 5} enqueues; at 0 queued: {rss0[key] / 1024:.1f} MiB"))


# ---------------------------------------------------------------- 4. idle CPU

def measure_idle(a, sz, rows, raw):
    projects, secs = sz["idle_projects"], sz["idle_secs"]
    body = "".join(f'[projects.p{i}]\ncommand = ["true"]\n' for i in range(projects))  # default tick
    f = Fleet(a.fleet, body)
    try:
        f.enqueue("p0")  # creates the database; the run drains before the window opens
        f.start()
        f.wait_up()
        wait_for(lambda: f.one("SELECT COUNT(*) FROM runs WHERE status = 'succeeded'") == 1, 30,
                 "the warm-up run to succeed", alive=f)
        settle = time.monotonic() + 2.0  # past start-up: first EVALs, reaping, watcher set-up
        wait_for(lambda: time.monotonic() >= settle, 5, "settle", interval=0.1)
        pid = f.daemon.pid
        hz = os.sysconf("SC_CLK_TCK")
        c0, s0, t0 = cpu_ticks(pid), ctx_switches(pid), time.monotonic()
        end = t0 + secs
        wait_for(lambda: time.monotonic() >= end, secs + 5, "the idle window", interval=0.5, alive=f)
        c1, s1, t1 = cpu_ticks(pid), ctx_switches(pid), time.monotonic()
        f.check()
        cpu_s = (c1 - c0) / hz
        share = 100 * cpu_s / (t1 - t0)
        raw["idle"] = dict(projects=projects, secs=t1 - t0, cpu_s=cpu_s, ctx_switches=s1 - s0,
                           rss_kib=f.pid_status("VmRSS"))
        rows.append(dict(measure=f"idle daemon, {projects:,} projects, nothing queued, {t1 - t0:.0f} s: CPU of one core",
                         fleet=f"{share:.3f} %", anchor="target 0.1 %", ratio=f"{share / 0.1:.2f}x",
                         target="≤ 0.1 %", met=share <= 0.1,
                         notes=f"{cpu_s * 1e3:.0f} ms CPU (utime+stime, {1e3 / hz:.0f} ms ticks); "
                               f"{(s1 - s0) / (t1 - t0):.1f} context switches/s; RSS {raw['idle']['rss_kib'] / 1024:.1f} MiB"))
    finally:
        f.close()


# ---------------------------------------------------------------- 5. restart to first claim

def restart_template(a, rows_total, queued, projects=32):
    """A state directory as a daemon leaves it after `rows_total - queued` runs that ended
    (rows and their events), with `queued` runs waiting, and no daemon. Returns the Fleet, the
    first queued id, and the ids of the terminal runs."""
    body = f'max_concurrency = 16\n' + "".join(
        f'[projects.p{p}]\ncommand = ["true"]\n' for p in range(projects))  # default tick
    f = Fleet(a.fleet, body)
    f.enqueue("p0")  # creates the database
    con = f.con
    con.execute("BEGIN IMMEDIATE")
    con.execute("DELETE FROM runs")
    con.execute("DELETE FROM events")
    con.execute("UPDATE meta SET value = 1 WHERE key = 'epoch'")
    now = int(time.time() * 1000)
    done = rows_total - queued
    t = now - done * 50
    runs, events = [], []
    for i in range(done):
        rid, p = i + 1000, f"p{i % projects}"
        s, e = t + i * 50, t + i * 50 + 20
        runs.append((rid, p, "default", "succeeded", "manual", s - 5, s, e, 1, 0, 1, 1))
        for at, fr, to in ((s - 5, None, "queued"), (s, "queued", "starting"), (s + 1, "starting", "running"),
                           (e, "running", "succeeded")):
            events.append((rid, at, 1, fr, to, p, "default", 1, 1))
    con.executemany("INSERT INTO runs (id, project, namespace, status, trigger, enqueued_at, started_at, "
                    "finished_at, pid, exit_code, claim_token, epoch) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", runs)
    con.executemany("INSERT INTO events (run_id, at, epoch, from_status, to_status, project, namespace, "
                    "attempt, claim_token) VALUES (?,?,?,?,?,?,?,?,?)", events)
    first = 1000 + done
    con.executemany("INSERT INTO runs (id, project, namespace, status, trigger, enqueued_at) "
                    "VALUES (?, ?, 'default', 'queued', 'manual', ?)",
                    [(first + j, f"p{j % projects}", now) for j in range(queued)])
    con.execute("COMMIT")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    f._con.close()
    f._con = None
    shutil.copy(f.db_path, f.db_path + ".template")
    return f, first, [r[0] for r in runs]


def reset_db(f):
    f.con.close()
    f._con = None
    for ext in ("-wal", "-shm"):
        try:
            os.remove(f.db_path + ext)
        except FileNotFoundError:
            pass
    shutil.copy(f.db_path + ".template", f.db_path)


def restart_once(f, first):
    """Start `fleet daemon`; the time until the first queued run leaves `queued` (its claim,
    committed), polled every millisecond on a separate connection."""
    reset_db(f)
    f.one("SELECT COUNT(*) FROM runs WHERE id >= ?", first)  # open the reader before the clock starts
    wall0 = time.time()
    f.start()
    t0 = f.started_at
    wait_for(lambda: f.one("SELECT COUNT(*) FROM runs WHERE id >= ? AND status != 'queued'", first) > 0,
             30, "the first claim after a restart", interval=0.001, alive=f)
    dt = time.monotonic() - t0
    # The EVAL that claimed began at events.at (its `now`), a cross-check on the poll.
    at = f.one("SELECT MIN(at) FROM events WHERE run_id >= ? AND to_status = 'starting'", first)
    f.stop()
    # The claimed runs (`true`) end on their own; wait so the next restart sees no live shim.
    wait_for(lambda: not [p for p in tagged_pids() if not zombie(p)], 30, "the runs' shims to exit")
    return dt, (at - wall0 * 1000) / 1000 if at else None


# A run's records as a shim leaves them (`started` alone: what the restart reads is the slot's
# first byte and its lock).
STARTED_LINE = (b'{"record":"started","token":1,"shim_pid":1,"shim_start_time":1,'
                b'"at":"2026-01-01T00:00:00.000Z","history":[1]}\n')
SLOT_LEN, RUNS_PER_SEGMENT = 4096, 1024


def write_slot(runs_dir, rid, line):
    """Puts `line` (zeros after it) in run `rid`'s slot of its segment, `runs/records-<first id>`,
    as fleet lays them out (supervisor::shim::segment): a 4 KiB header, then 4 KiB per run."""
    first = rid // RUNS_PER_SEGMENT * RUNS_PER_SEGMENT
    path = os.path.join(runs_dir, f"records-{first}")
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.pwrite(fd, b"fleet run records 1\n", 0)
        os.pwrite(fd, line.ljust(SLOT_LEN, b"\0"), SLOT_LEN * (1 + rid % RUNS_PER_SEGMENT))
    finally:
        os.close(fd)


def measure_restart(a, sz, rows, raw):
    n, q, reps = sz["restart_rows"], sz["restart_queued"], sz["restart_reps"]
    f, first, done_ids = restart_template(a, n, q)
    try:
        results = {}
        runs_dir = os.path.join(f.state, "runs")
        for variant in ("rows", "rows+files"):
            if variant == "rows+files":
                # A daemon that ran these runs left their files under runs/ (nothing prunes
                # them: each run's records in its slot of a segment, and a log); recovery looks
                # at every run there, so it is measured with them too.
                os.makedirs(runs_dir, mode=0o700, exist_ok=True)
                for rid in done_ids:
                    write_slot(runs_dir, rid, STARTED_LINE)
                    path = os.path.join(runs_dir, f"{rid}.log")
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            samples = []
            for _ in range(reps):
                samples.append(restart_once(f, first))
                # Remove the files of the runs this restart claimed: the template has none.
                for rid in range(first, first + q):
                    write_slot(runs_dir, rid, b"")
                    for suffix in (".lock", ".log", ".more"):
                        try:
                            os.remove(os.path.join(runs_dir, f"{rid}{suffix}"))
                        except FileNotFoundError:
                            pass
                    shutil.rmtree(os.path.join(runs_dir, str(rid)), ignore_errors=True)
            results[variant] = samples
            polled = [s[0] for s in samples]
            med = statistics.median(polled) * 1e3
            label = f"{n:,} rows" if variant == "rows" else f"{n:,} rows and the files of {len(done_ids):,} runs"
            evs = [s[1] * 1e3 for s in samples if s[1] is not None]
            rows.append(dict(measure=f"restart: `fleet daemon` start to first claim, {label} ({q} queued)",
                             fleet=f"{med:.0f} ms", anchor="target 200 ms", ratio=f"{med / 200:.2f}x",
                             target="≤ 200 ms", met=med <= 200,
                             notes=f"median of {reps}: {fmt_list([p * 1e3 for p in polled], 'ms', 0)}; "
                                   f"claiming EVAL began at {fmt_list(evs, 'ms', 0)} (events.at)"))
        raw["restart"] = dict(rows=n, queued=q, samples=results)
    finally:
        f.close()


# ---------------------------------------------------------------- report

def fmt_list(xs, unit, digits=2):
    return "(" + ", ".join(f"{x:.{digits}f}" for x in xs) + f") {unit}"


def fmt_ns(ns):
    for unit, div in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= div:
            return f"{ns / div:.2f} {unit}"
    return f"{ns:.0f} ns"


def commit():
    try:
        h = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return h + ("-dirty" if dirty else "")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown (not a git checkout)"


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    rustc = subprocess.run(["rustc", "-V"], capture_output=True, text=True).stdout.strip() or "?"
    return f"{os.cpu_count()} CPUs ({model}), {mem} RAM, Linux {platform.release()}, {rustc}"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def table(rows):
    out = ["| measure | fleet | anchor (same run) | ratio | target | met | notes |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        met = {True: "yes", False: "**no**", None: "—"}[r["met"]] if not isinstance(r["met"], str) else r["met"]
        out.append(f"| {r['measure']} | {r['fleet']} | {r['anchor']} | {r['ratio']} | {r['target']} | {met} | {r['notes']} |")
    return "\n".join(out)


def in_own_file(name):
    """A measure kept in bench/<name>.py; it borrows this module's helpers and process tag."""
    def measure(a, sz, rows, raw):
        sys.path.insert(0, HERE)
        import importlib
        importlib.import_module(name).measure(sys.modules[__name__], a, sz, rows, raw)
    return measure


measure_scrape = in_own_file("scrape")
measure_hosts = in_own_file("hosts")


MEASURES = {"dispatch": measure_dispatch, "eval": measure_eval, "enqueue": measure_enqueue,
            "idle": measure_idle, "restart": measure_restart, "scrape": measure_scrape,
            "hosts": measure_hosts}


def build(a):
    if a.fleet:
        a.fleet = os.path.abspath(a.fleet)
    else:
        a.fleet = os.path.join(a.target_dir, "release", "fleet")
        if not a.no_build:
            print("building: cargo build --release -p fleet", file=sys.stderr, flush=True)
            r = subprocess.run(["cargo", "build", "--release", "-p", "fleet"], cwd=REPO)
            if r.returncode != 0:
                sys.exit(f"error: `cargo build --release -p fleet` failed (exit {r.returncode}) in {REPO}")
    if not (os.path.isfile(a.fleet) and os.access(a.fleet, os.X_OK)):
        sys.exit(f"error: no fleet binary at {a.fleet}. Build it with `cargo build --release -p fleet` "
                 f"(drop --no-build to let the suite do it), or pass --fleet PATH.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="every measure at a tiny size; no figure is judged (CI)")
    ap.add_argument("--only", help=f"comma-separated subset of: {', '.join(MEASURES)}")
    ap.add_argument("--fleet", help="measure this fleet binary (no build); default: build and measure <target>/release/fleet")
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build")
    ap.add_argument("--no-pueue", action="store_true", help="leave pueue out of the dispatch measure")
    ap.add_argument("--no-pueue-install", action="store_true", help="use pueue only if already in the tools dir")
    ap.add_argument("--eval-bench", action="store_true", help="with --tiny: run the criterion bench too (--quick, 1k)")
    ap.add_argument("--repeat", type=int, help="repetitions of the dispatch measure (default 3, tiny 1)")
    ap.add_argument("--out", help="markdown output (default: <target>/bench/results.md)")
    a = ap.parse_args()
    # Whatever the parent set (a background job ignores SIGINT): ^C, SIGTERM and SIGHUP all go
    # through the finally below, which stops every process the suite started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit("terminated"))
    sz = dict(SIZES["tiny" if a.tiny else "full"])
    if a.repeat is not None:
        if a.repeat < 1:
            sys.exit(f"error: --repeat must be at least 1, got {a.repeat}")
        sz["repeat"] = a.repeat
    if a.only is not None and not a.only.strip():
        sys.exit(f"error: --only needs at least one of: {', '.join(MEASURES)}")
    only = a.only.split(",") if a.only else list(MEASURES)
    for m in only:
        if m not in MEASURES:
            sys.exit(f"error: unknown measure {m!r}; known: {', '.join(MEASURES)}")
    try:
        a.target_dir = cargo_target_dir()
    except Exception:
        a.target_dir = os.path.join(REPO, "target")
    a.tools = os.path.join(a.target_dir, "bench-tools")
    a.out_dir = os.path.join(a.target_dir, "bench")
    os.makedirs(a.out_dir, exist_ok=True)
    out = a.out or os.path.join(a.out_dir, "results.md")
    build(a)

    start, load0 = time.monotonic(), loadavg()
    rows, raw, errors = [], {"tag": TAG}, []
    try:
        for m in only:
            print(f"== {m}", file=sys.stderr, flush=True)
            t = time.monotonic()
            try:
                MEASURES[m](a, sz, rows, raw)
            except NotRun as e:
                rows.append(dict(measure=m, fleet="—", anchor=f"not run: {e}", ratio="—", target="—", met=None, notes=""))
            except Exception as e:
                traceback.print_exc()
                errors.append(m)
                rows.append(dict(measure=m, fleet="—", anchor=f"**error**: {str(e).splitlines()[0][:200]}",
                                 ratio="—", target="—", met=None, notes=""))
            finally:
                kill_everything()
            raw.setdefault("seconds", {})[m] = time.monotonic() - t
            print(f"   {m}: {time.monotonic() - t:.1f} s", file=sys.stderr, flush=True)
    finally:
        kill_everything()
    total = time.monotonic() - start
    if a.tiny:
        for r in rows:
            if r["met"] is not None:
                r["met"] = "(not judged: --tiny)"
    head = [f"fleet benchmark suite{' (--tiny: sizes too small to judge)' if a.tiny else ''}",
            "",
            f"- commit: `{commit()}`, binary `{os.path.relpath(a.fleet, REPO)}`",
            f"- machine: {machine()}",
            f"- load average before / after: {load0} / {loadavg()}",
            f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; suite wall time {total:.0f} s "
            f"({', '.join(f'{k} {v:.0f} s' for k, v in raw.get('seconds', {}).items())})",
            f"- command: `python3 bench/suite.py{''.join(' ' + x for x in sys.argv[1:])}`",
            ""]
    text = "\n".join(head) + "\n" + table(rows) + "\n"
    print(text)
    with open(out, "w") as f:
        f.write(text)
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        json.dump(dict(raw, rows=rows), f, indent=1, default=str)
    print(f"(written to {out})", file=sys.stderr)
    if errors:
        sys.exit(f"error: {len(errors)} measure(s) failed: {', '.join(errors)}")


if __name__ == "__main__":
    main()
