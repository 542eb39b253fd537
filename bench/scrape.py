"""The `scrape` measure of bench/suite.py: what `/metrics` costs with a long history, and what
scraping it costs a drain running at the same time.

A state directory with `projects` projects and `history` ended runs (inserted in one transaction,
like any other writer; the database's triggers count them as they go in) plus `drain` queued runs
of `true`. Each repetition restores it, starts `fleet daemon` (cap 16, `http_listen` on a free
loopback port) and times the drain from the daemon's start until nothing is queued or active:
once with nobody scraping, once with a client scraping `/metrics` back to back for the whole
drain (far harsher than Prometheus's one scrape every 15 s), and once scraped every second,
alternating. After each quiet drain,
30 scrapes of the idle daemon are timed one by one (wall time of the whole HTTP exchange); then
the same with a tenth of the history, then again with all of it, each on a fresh daemon.

Called by suite.py with the suite module itself (`h`) for its helpers, so that both share one
process tag and one cleanup.
"""
import os, re, shutil, statistics, threading, time, urllib.request


def _template(h, a, projects, history, drain):
    body = (f'max_concurrency = 16\ntick = "1h"\nhttp_listen = "127.0.0.1:0"\n'
            + "".join(f'[projects.p{p}]\ncommand = ["true"]\n' for p in range(projects)))
    f = h.Fleet(a.fleet, body)
    f.enqueue("p0")  # creates the database
    con = f.con
    con.execute("BEGIN IMMEDIATE")
    con.execute("DELETE FROM runs")
    now = int(time.time() * 1000)
    t = now - history * 10
    con.executemany(
        "INSERT INTO runs (project, namespace, status, trigger, enqueued_at, started_at, finished_at, "
        "exit_code) VALUES (?, 'default', ?, 'manual', ?, ?, ?, ?)",
        [(f"p{i % projects}", "failed" if i % 10 == 0 else "succeeded", t + i * 10, t + i * 10 + 1,
          t + i * 10 + 5, 1 if i % 10 == 0 else 0) for i in range(history)])
    con.executemany(
        "INSERT INTO runs (project, namespace, status, trigger, enqueued_at) VALUES (?, 'default', 'queued', 'manual', ?)",
        [(f"p{i % projects}", now) for i in range(drain)])
    con.execute("COMMIT")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    f._con.close()
    f._con = None
    shutil.copy(f.db_path, f.db_path + ".template")
    return f


def _address(h, f):
    """The IP:PORT the daemon logged (`serving HTTP … address=http://IP:PORT`)."""
    def found():
        try:
            with open(f.log_path, errors="replace") as log:
                m = re.findall(r"address=http://(\S+)", log.read())
            return m[-1] if m else None
        except OSError:
            return None
    return h.wait_for(found, 30, "the daemon's HTTP address", alive=f)


def _scrape(addr):
    t = time.perf_counter()
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=30) as r:
        body = r.read()
    return time.perf_counter() - t, len(body)


def _drain_once(h, f, scraping, pace=0.0):
    """Seconds from the daemon's start until the queue is drained; with `scraping`, a thread
    scrapes meanwhile, back to back or (`pace` > 0) one scrape every `pace` seconds. Returns
    (seconds, the scrapes' latencies)."""
    h.reset_db(f)
    f.one("SELECT COUNT(*) FROM runs")  # open the reader before the clock starts
    mark = os.path.getsize(f.log_path) if os.path.exists(f.log_path) else 0
    f.start()
    t0 = f.started_at
    stop, lat = threading.Event(), []

    def scraper():
        # The address appears in the log a moment after the start.
        addr = None
        while not stop.is_set() and addr is None:
            with open(f.log_path, errors="replace") as log:
                log.seek(mark)
                m = re.findall(r"address=http://(\S+)", log.read())
            addr = m[-1] if m else None
        while not stop.is_set():
            lat.append(_scrape(addr)[0])
            if pace:
                stop.wait(pace)  # pacing, as Prometheus does; not a synchronisation

    th = threading.Thread(target=scraper, daemon=True) if scraping else None
    if th:
        th.start()
    h.wait_for(lambda: f.one("SELECT COUNT(*) FROM runs WHERE status IN ('queued','starting','running')") == 0,
               600, "the drain", interval=0.02, alive=f)
    elapsed = time.monotonic() - t0
    stop.set()
    if th:
        th.join(60)
    return elapsed, lat


def _idle_scrapes(h, a, projects, history, n=30):
    """Latencies of `n` scrapes, one by one, of an idle daemon over `history` ended runs."""
    f = _template(h, a, projects, history, 0)
    try:
        h.reset_db(f)
        f.start()
        addr = _address(h, f)
        _scrape(addr)  # the first read warms the page cache; not counted
        return [_scrape(addr)[0] for _ in range(n)]
    finally:
        f.close()


def measure(h, a, sz, rows, raw):
    projects, history, drain, reps = sz["scrape_projects"], sz["scrape_history"], sz["scrape_drain"], sz["repeat"]
    f = _template(h, a, projects, history, drain)
    try:
        quiet, busy, paced, idle, size = [], [], [], [], 0
        for _ in range(reps):
            for scraping, pace in ((False, 0.0), (True, 0.0), (True, 1.0)):
                secs, lat = _drain_once(h, f, scraping, pace)
                if scraping and not pace:
                    busy.append((secs, lat))
                elif scraping:
                    paced.append(secs)
                else:
                    quiet.append(secs)
                    addr = _address(h, f)
                    for _ in range(30):
                        dt, size = _scrape(addr)
                        idle.append(dt)
                f.stop()
                h.wait_for(lambda: not [p for p in h.tagged_pids() if not h.zombie(p)], 60, "the shims to exit")
        q = statistics.median(quiet)
        b = statistics.median([s for s, _ in busy])
        during = [x for _, lat in busy for x in lat]
        med_idle = statistics.median(idle) * 1e3
        p95_idle = sorted(idle)[int(len(idle) * 0.95) - 1] * 1e3
        rows.append(dict(
            measure=f"scrape: one `/metrics` of an idle daemon, {projects:,} projects, {history:,} runs of history",
            fleet=f"{med_idle:.1f} ms", anchor="—", ratio="—", target="O(projects), not O(history)", met=None,
            notes=f"median of {len(idle)}; p95 {p95_idle:.1f} ms; exposition {size / 1024:.0f} KiB"))
        rows.append(dict(
            measure=f"scrape: drain of {drain:,} `true` (cap 16) with `/metrics` scraped back to back, vs none",
            fleet=f"{b:.2f} s", anchor=f"{q:.2f} s unscraped", ratio=f"{b / q:.2f}x", target="—", met=None,
            notes=f"medians of {reps}: scraped {h.fmt_list([s for s, _ in busy], 's')}, unscraped "
                  f"{h.fmt_list(quiet, 's')}; {len(during)} scrapes during the drains, median "
                  f"{statistics.median(during) * 1e3 if during else 0:.1f} ms"))
        # The same idle scrape over a tenth of the history: a scrape that read the history
        # would take about ten times longer at the full size.
        small = _idle_scrapes(h, a, projects, history // 10)
        full = _idle_scrapes(h, a, projects, history)
        rows.append(dict(
            measure=f"scrape: idle `/metrics`, {history:,} vs {history // 10:,} runs of history ({projects:,} projects)",
            fleet=f"{statistics.median(full) * 1e3:.1f} ms",
            anchor=f"{statistics.median(small) * 1e3:.1f} ms at {history // 10:,}",
            ratio=f"{statistics.median(full) / statistics.median(small):.2f}x", target="≈ 1x (not 10x)", met=None,
            notes=f"medians of {len(full)} each, both from fresh daemons on fresh copies"))
        p = statistics.median(paced)
        rows.append(dict(
            measure=f"scrape: the same drain with `/metrics` scraped once a second, vs none",
            fleet=f"{p:.2f} s", anchor=f"{q:.2f} s unscraped", ratio=f"{p / q:.2f}x", target="—", met=None,
            notes=f"medians of {reps}: {h.fmt_list(paced, 's')}"))
        raw["scrape"] = dict(paced=paced, idle_small_ms=[x * 1e3 for x in small],
                             idle_full_ms=[x * 1e3 for x in full], projects=projects, history=history, drain=drain, quiet=quiet,
                             busy=[s for s, _ in busy], idle_ms=[x * 1e3 for x in idle],
                             during_ms=[x * 1e3 for x in during], size=size)
    finally:
        f.close()
