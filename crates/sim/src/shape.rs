//! The simulated fleet.toml: a few namespaces and projects with caps drawn from the seed, and
//! the same ones under new caps for an edit.

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
}

/// How many projects a simulated config has (`p0`…).
pub(crate) const PROJECTS: usize = 5;

impl Shape {
    pub(crate) fn draw(rng: &mut ChaCha8Rng) -> Shape {
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
        Shape {
            global: rng.gen_range(1..=6),
            namespaces,
            projects,
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
        next
    }

    pub(crate) fn toml(&self, state_dir: &Path) -> String {
        let mut t = format!(
            "state_dir = {:?}\nmax_concurrency = {}\nkeep_runs = \"off\"\nkeep_for = \"off\"\n",
            state_dir.display().to_string(),
            self.global
        );
        for (name, cap) in &self.namespaces {
            t.push_str(&format!("[namespaces.{name}]\nmax_concurrency = {cap}\n"));
        }
        for (name, ns, max_parallel, retries) in &self.projects {
            t.push_str(&format!(
                "[projects.{name}]\ncommand = [\"true\"]\nmax_parallel = {max_parallel}\nretries = {retries}\nretry_backoff = \"1s\"\n"
            ));
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
