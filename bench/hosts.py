"""The `hosts` measure of bench/suite.py: fleet on PostgreSQL, with several hosts.

1. Dispatch: N runs of `true` (cap 16, 32 projects, tick 1 h) queued with no daemon, then timed
   from the daemons' start until nothing is queued or active: three hosts (three `fleet daemon`s,
   each with its own state directory and host name, one PostgreSQL database) against one host on
   SQLite (the dispatch measure's drain), alternating, in the same run; one host on PostgreSQL
   too, in the notes. The ratio is the throughput of the three hosts over that of the one.
2. The claim's cost with a deep queue: one host on PostgreSQL drains M runs of `true` (cap 16)
   while B runs sit queued in another namespace whose cap is held by a run that never ends
   (every EVAL still looks at them), against the same drain with nothing else queued. The figure
   is the time per run, which is one claim, spawn and end each.

The server is found the way the tests find it (crates/pgtest): `FLEET_PG_BINDIR`, then Debian's
`/usr/lib/postgresql/<version>/bin` (highest version first), then `PATH`; as root it runs as
`nobody` (PostgreSQL refuses root). One throwaway cluster for the whole measure, in a temporary
folder, on a unix socket only, never on TCP. Without the binaries the measure is not run (the
table says so), unless `FLEET_REQUIRE_POSTGRES=1`, where that is an error.

Called by suite.py with the suite module itself (`h`) for its helpers, so that both share one
process tag and one cleanup.
"""
import glob, os, shutil, signal, statistics, subprocess, tempfile, time

ROLE = "fleet"
PORT = 5432
ACTIVE = "('queued','starting','running')"


def _bindir():
    has = lambda d: os.path.isfile(os.path.join(d, "initdb")) and os.path.isfile(os.path.join(d, "postgres"))
    if os.environ.get("FLEET_PG_BINDIR"):
        d = os.environ["FLEET_PG_BINDIR"]
        if has(d):
            return d
        raise RuntimeError(f"FLEET_PG_BINDIR={d} holds no initdb and postgres")
    versions = []
    for d in glob.glob("/usr/lib/postgresql/*/bin"):
        v = os.path.basename(os.path.dirname(d))
        if v.isdigit() and has(d):
            versions.append((int(v), d))
    if versions:
        return max(versions)[1]
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and has(d):
            return d
    return None


class Cluster:
    """A throwaway PostgreSQL server on a unix socket in a temporary folder."""

    def __init__(self, h, bindir):
        self.h, self.bindir = h, bindir
        self.root = os.geteuid() == 0
        self.tmp = tempfile.mkdtemp(prefix="fleet-bench-pg.")
        self.data = os.path.join(self.tmp, "data")
        self.proc = None
        if self.root:
            subprocess.run(["chown", "nobody:nogroup", self.tmp], check=True)
        self._server(["initdb", "-D", self.data, "-U", ROLE, "--auth=trust", "--no-sync", "-E", "UTF8",
                      "--locale=C", "--no-instructions"], wait=True)
        self.proc = self._server(
            ["postgres", "-D", self.data, "-k", self.tmp, "-c", "listen_addresses=", "-p", str(PORT),
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=200"], wait=False)
        h.wait_for(lambda: self._ready(), 60, "the PostgreSQL server to accept connections", interval=0.05)

    def _argv(self, argv):
        argv = [os.path.join(self.bindir, argv[0])] + argv[1:]
        if self.root:
            argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"] + argv
        return argv

    def _server(self, argv, wait):
        log = open(os.path.join(self.tmp, "server.log"), "ab")
        if wait:
            r = subprocess.run(self._argv(argv), stdout=log, stderr=subprocess.STDOUT, env=self.h.child_env())
            if r.returncode != 0:
                raise RuntimeError(f"{argv[0]} exited {r.returncode}; see {self.tmp}/server.log")
            return None
        # Not through h.popen, and without the suite's tag: the suite's cleanup (which waits for
        # every tagged process to be gone after each fleet) must not count or kill the server;
        # close() stops it.
        env = self.h.child_env()
        env.pop(self.h.TAG_VAR, None)
        return subprocess.Popen(self._argv(argv), stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)

    def _ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"postgres exited {self.proc.returncode}; see {self.tmp}/server.log")
        return subprocess.run([os.path.join(self.bindir, "pg_isready"), "-q", "-h", self.tmp, "-p", str(PORT)],
                              env=self.h.child_env()).returncode == 0

    def url(self, db):
        return f"postgresql://{ROLE}@/{db}?host={self.tmp}&port={PORT}"

    def sql(self, db, text):
        """Runs `text` with psql on database `db`; returns what it printed (unaligned, no header)."""
        return self.h.run([os.path.join(self.bindir, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                           "-h", self.tmp, "-p", str(PORT), "-U", ROLE, "-d", db, "-c", text], timeout=600).strip()

    def create(self, db):
        self.sql("postgres", f"CREATE DATABASE {db}")

    def close(self):
        if self.proc is not None:
            # SIGINT: PostgreSQL's fast shutdown, which ends the backends too (SIGTERM would wait
            # for their clients); then anything left of the server's process group goes, so that
            # no backend outlives the measure (one busy on a statement would skew the next).
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
            self.h.stop(self.proc, grace=30)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def _body(url, host, projects, cap, extra=""):
    return (f'host = "{host}"\ndatabase = "{url}"\nmax_concurrency = {cap}\ntick = "1h"\n' + extra
            + "".join(f'[projects.p{p}]\ncommand = ["true"]\n' for p in range(projects)))


def _queue(c, db, rows_sql):
    """Inserts queued runs in one statement (a SELECT of (project, namespace) rows)."""
    now = int(time.time() * 1000)
    c.sql(db, "INSERT INTO runs (project, namespace, status, trigger, enqueued_at) "
              f"SELECT p, ns, 'queued', 'manual', {now} FROM ({rows_sql}) AS q(p, ns)")


def _drain(h, c, db, fleets, n, timeout=900):
    """Starts every fleet's daemon at once and times until nothing of `db` is queued or active."""
    t = time.monotonic()
    for f in fleets:
        f.start()
    def drained():
        for f in fleets:
            f.check()
        return c.sql(db, f"SELECT count(*) FROM runs WHERE status IN {ACTIVE}") == "0"
    h.wait_for(drained, timeout, f"{n} runs to drain on PostgreSQL", interval=0.05)
    elapsed = time.monotonic() - t
    bad = c.sql(db, "SELECT count(*) FROM runs WHERE status <> 'succeeded'")
    if bad != "0":
        raise RuntimeError(f"{bad} of {n} runs did not succeed on PostgreSQL")
    return elapsed


def _hosts_drain(h, a, c, n, k, hosts=3, projects=32, cap=16):
    db = f"dispatch{k}"
    c.create(db)
    fleets = [h.Fleet(a.fleet, _body(c.url(db), f"h{i}", projects, cap)) for i in range(hosts)]
    try:
        fleets[0].enqueue("p0")  # creates the schema; the rest in one statement
        _queue(c, db, f"SELECT 'p' || (i % {projects}), 'default' FROM generate_series(1, {n - 1}) AS i")
        elapsed = _drain(h, c, db, fleets, n)
        try:
            split = c.sql(db, "SELECT coalesce(host, '?') || ' ' || count(*) FROM runs GROUP BY host ORDER BY host")
        except RuntimeError:
            split = "(no runs.host column)"
        return elapsed, split.replace("\n", ", ")
    finally:
        # Every daemon stopped before any fleet is closed: closing waits until no process of
        # the suite is left, and the other hosts' daemons are such processes.
        for f in fleets:
            f.stop()
        for f in fleets:
            f.close()


def _backlog_drain(h, a, c, m, backlog, k, projects=32, cap=16):
    """One host: `m` runs of `true` in namespace default, with `backlog` queued in namespace
    held (cap 1, taken by a run that sleeps) behind them. Returns the drain's time and the
    time the backlog's one INSERT took (s)."""
    db = f"backlog{k}"
    c.create(db)
    extra = ('[namespaces.held]\nmax_concurrency = 1\n'
             '[projects.hold]\nnamespace = "held"\ncommand = ["sleep", "3600"]\n'
             '[projects.waiting]\nnamespace = "held"\ncommand = ["true"]\n')
    f = h.Fleet(a.fleet, _body(c.url(db), "h0", projects, cap + 1, extra))
    try:
        hold = str(f.enqueue("hold"))
        tq = time.monotonic()
        _queue(c, db, f"SELECT 'waiting', 'held' FROM generate_series(1, {backlog}) AS i")
        queued = time.monotonic() - tq
        f.start()
        h.wait_for(lambda: c.sql(db, "SELECT count(*) FROM runs WHERE project = 'hold' AND status = 'running'") == "1",
                   120, "the run holding the namespace", interval=0.05, alive=f)
        f.stop()
        _queue(c, db, f"SELECT 'p' || (i % {projects}), 'default' FROM generate_series(1, {m}) AS i")
        t = time.monotonic()
        f.start()
        h.wait_for(lambda: c.sql(db, f"SELECT count(*) FROM runs WHERE namespace = 'default' AND status IN {ACTIVE}") == "0",
                   900, f"{m} runs to drain past {backlog} queued", interval=0.05, alive=f)
        elapsed = time.monotonic() - t
        bad = c.sql(db, "SELECT count(*) FROM runs WHERE namespace = 'default' AND status <> 'succeeded'")
        if bad != "0":
            raise RuntimeError(f"{bad} of {m} runs did not succeed")
        # The holding run ends (the backlog held, so it does not start behind it), so that
        # closing the fleet finds no shim left.
        f.cli("pause", "--project", "waiting")
        f.cli("cancel", hold)
        h.wait_for(lambda: c.sql(db, f"SELECT count(*) FROM runs WHERE status IN ('starting','running')") == "0",
                   120, "the holding run to end", interval=0.05, alive=f)
        return elapsed, queued
    finally:
        f.close()


def measure(h, a, sz, rows, raw):
    bindir = _bindir()
    if bindir is None:
        why = "PostgreSQL not found (no initdb and postgres in FLEET_PG_BINDIR, /usr/lib/postgresql/*/bin or PATH)"
        if os.environ.get("FLEET_REQUIRE_POSTGRES") == "1":
            raise RuntimeError(why + ", and FLEET_REQUIRE_POSTGRES=1 requires it")
        raise h.NotRun(why)
    c = Cluster(h, bindir)
    failed = []
    try:
        for part in (_dispatch, _claims):
            # Each part gives its own row; one that breaks does not hide the other's figure.
            try:
                part(h, a, c, sz, rows, raw)
            except h.NotRun:
                raise
            except Exception as e:
                failed.append(f"{part.__name__.strip('_')}: {str(e).splitlines()[0][:200]}")
    finally:
        c.close()
    if failed:
        raise RuntimeError("; ".join(failed))


def _dispatch(h, a, c, sz, rows, raw):
    n, reps = sz["hosts_runs"], sz["repeat"]
    three, one, one_pg, splits = [], [], [], []
    for k in range(reps):
        t, split = _hosts_drain(h, a, c, n, 2 * k)
        three.append(t)
        splits.append(split)
        one.append(h.fleet_drain(a.fleet, n))
        # One host on PostgreSQL too: what the database costs apart from the hosts.
        one_pg.append(_hosts_drain(h, a, c, n, 2 * k + 1, hosts=1)[0])
    t3, t1 = statistics.median(three), statistics.median(one)
    raw["hosts_dispatch"] = dict(three_hosts_pg=three, one_host_sqlite=one, one_host_pg=one_pg,
                                 runs=n, split=splits)
    rows.append(dict(
        measure=f"dispatch of {n:,} `true` (cap 16): three hosts on PostgreSQL vs one host on SQLite",
        fleet=f"{n / t3:.0f} runs/s", anchor=f"SQLite, one host: {n / t1:.0f} runs/s",
        ratio=f"{t1 / t3:.2f}x", target="— (context)", met=None,
        notes=f"median of {reps}; three hosts {h.fmt_list(three, 's')}, one host {h.fmt_list(one, 's')}; "
              f"one host on PostgreSQL {n / statistics.median(one_pg):.0f} runs/s {h.fmt_list(one_pg, 's')}; "
              f"runs per host (last): {splits[-1]}"))


def _claims(h, a, c, sz, rows, raw):
    m, backlog, reps = sz["hosts_claims"], sz["hosts_backlog"], sz["repeat"]
    deep, shallow, inserts = [], [], []
    for k in range(reps):
        t, queued = _backlog_drain(h, a, c, m, backlog, 2 * k)
        deep.append(t)
        inserts.append(queued)
        shallow.append(_backlog_drain(h, a, c, m, 0, 2 * k + 1)[0])
    d, s = statistics.median(deep), statistics.median(shallow)
    raw["hosts_claims"] = dict(deep=deep, shallow=shallow, runs=m, backlog=backlog,
                               backlog_insert=inserts)
    rows.append(dict(
        measure=f"claim on PostgreSQL: time per run draining {m:,} `true`, {backlog:,} queued behind a full cap vs none",
        fleet=f"{d / m * 1000:.2f} ms", anchor=f"none queued: {s / m * 1000:.2f} ms",
        ratio=f"{d / s:.2f}x", target="— (context)", met=None,
        notes=f"median of {reps}; drains {h.fmt_list(deep, 's')} vs {h.fmt_list(shallow, 's')}; one host; "
              f"the backlog queued in one INSERT in {h.fmt_list(inserts, 's')}"))
