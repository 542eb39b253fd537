//! The simulated fleet.toml: a few namespaces and projects with caps drawn from the seed, and
//! the same ones under new caps for an edit. With many hosts, some hosts have a cap of their
//! own and some projects may run on some hosts only.

use std::path::Path;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The caps of one simulated config.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    pub(crate) global: usize,
    /// Namespace caps; empty: no namespaces (the fallback packer).
    pub(crate) namespaces: Vec<(String, usize)>,
    /// Each project's namespace, `max_parallel` and retries.
    pub(crate) projects: Vec<(String, Option<usize>, u32, u32)>,
    /// The hosts (`h0`…), each with its own cap if it has one; one host: no `[hosts]` table.
    pub(crate) hosts: Vec<(String, Option<usize>)>,
    /// The hosts each project may run on (by index into `hosts`); `None`: any.
    pub(crate) placement: Vec<Option<Vec<usize>>>,
    /// The scheduled project `s0`: its period in seconds (a cron of seconds), its overlap
    /// policy and its `max_parallel`; `None` once the schedule is taken out (the drain).
    pub(crate) schedule: Option<(u32, &'static str, u32)>,
}

/// The overlap policies a scheduled project is drawn with.
const OVERLAPS: [&str; 3] = ["forbid", "queue", "replace"];

/// How many projects a simulated config has (`p0`…).
pub(crate) const PROJECTS: usize = 5;

impl Shape {
    pub(crate) fn draw(rng: &mut ChaCha8Rng, hosts: usize) -> Shape {
        let namespaces: Vec<(String, usize)> = if rng.gen_bool(0.3) {
            Vec::new()
        } else {
            vec![
                ("a".into(), rng.gen_range(1..=4)),
                ("b".into(), rng.gen_range(1..=4)),
            ]
        };
        let projects = (0..PROJECTS)
            .map(|i| {
                let ns = if namespaces.is_empty() {
                    None
                } else {
                    Some(rng.gen_range(0..=namespaces.len()))
                };
                (
                    format!("p{i}"),
                    ns,
                    rng.gen_range(1..=3u32),
                    rng.gen_range(0..=2u32),
                )
            })
            .collect();
        let global = rng.gen_range(1..=6);
        let (hosts, placement) = if hosts > 1 {
            let caps = (0..hosts)
                .map(|i| {
                    (
                        format!("h{i}"),
                        rng.gen_bool(0.5).then(|| rng.gen_range(1..=3)),
                    )
                })
                .collect();
            let placement = (0..PROJECTS)
                .map(|_| {
                    rng.gen_bool(0.3).then(|| {
                        let mut on: Vec<usize> = (0..hosts).filter(|_| rng.gen_bool(0.5)).collect();
                        if on.is_empty() {
                            on.push(rng.gen_range(0..hosts));
                        }
                        on
                    })
                })
                .collect();
            (caps, placement)
        } else {
            (vec![("h0".to_string(), None)], vec![None; PROJECTS])
        };
        let schedule = Some((
            [2, 3, 5, 10][rng.gen_range(0..4)],
            OVERLAPS[rng.gen_range(0..OVERLAPS.len())],
            rng.gen_range(1..=2),
        ));
        Shape {
            global,
            namespaces,
            projects,
            hosts,
            placement,
            schedule,
        }
    }

    /// The same projects and namespaces under new caps.
    pub(crate) fn redraw_caps(&self, rng: &mut ChaCha8Rng) -> Shape {
        let mut next = self.clone();
        next.global = rng.gen_range(1..=6);
        for ns in &mut next.namespaces {
            ns.1 = rng.gen_range(1..=4);
        }
        for p in &mut next.projects {
            p.2 = rng.gen_range(1..=3);
        }
        if next.hosts.len() > 1 {
            for h in &mut next.hosts {
                h.1 = rng.gen_bool(0.5).then(|| rng.gen_range(1..=3));
            }
        }
        next
    }

    /// The fleet.toml of host `host` (index into `hosts`), whose state directory is
    /// `state_dir`, on the PostgreSQL database `database` if one is given.
    pub(crate) fn toml(&self, state_dir: &Path, host: usize, database: Option<&str>) -> String {
        let mut t = format!(
            "host = {:?}\nstate_dir = {:?}\nmax_concurrency = {}\nkeep_runs = \"off\"\nkeep_for = \"off\"\n",
            self.hosts[host].0,
            state_dir.display().to_string(),
            self.global
        );
        if let Some(url) = database {
            t.push_str(&format!("database = {url:?}\n"));
        }
        if self.hosts.len() > 1 {
            for (name, cap) in &self.hosts {
                if let Some(cap) = cap {
                    t.push_str(&format!("[hosts.{name}]\nmax_concurrency = {cap}\n"));
                }
            }
        }
        for (name, cap) in &self.namespaces {
            t.push_str(&format!("[namespaces.{name}]\nmax_concurrency = {cap}\n"));
        }
        // Always there, so that its runs stay known once its schedule is taken out.
        t.push_str("[projects.s0]\ncommand = [\"true\"]\nretries = 1\nretry_backoff = \"1s\"\n");
        if let Some((every, overlap, max_parallel)) = self.schedule {
            t.push_str(&format!(
                "schedule = \"*/{every} * * * * *\"\noverlap = \"{overlap}\"\nmax_parallel = {max_parallel}\n"
            ));
        }
        for ((name, ns, max_parallel, retries), on) in self.projects.iter().zip(&self.placement) {
            t.push_str(&format!(
                "[projects.{name}]\ncommand = [\"true\"]\nmax_parallel = {max_parallel}\nretries = {retries}\nretry_backoff = \"1s\"\n"
            ));
            if let Some(on) = on {
                let names: Vec<String> = on
                    .iter()
                    .map(|i| format!("{:?}", self.hosts[*i].0))
                    .collect();
                t.push_str(&format!("hosts = [{}]\n", names.join(", ")));
            }
            if let Some(ns) = ns {
                let ns = match self.namespaces.get(*ns) {
                    Some((n, _)) => n.as_str(),
                    None => "default",
                };
                t.push_str(&format!("namespace = \"{ns}\"\n"));
            }
        }
        t
    }
}
