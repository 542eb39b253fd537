//! What operators and their tools do to the fleet, as steps: enqueue, cancel, pause and resume,
//! and edits of the caps in fleet.toml. Each goes through the store as the commands do; a
//! step refused because another program holds the database is simply not taken.

use std::sync::Arc;

use config::Config;
use rand::Rng;
use store::{HoldKind, NewRun, Trigger};

use crate::shape::PROJECTS;
use crate::{setup, Failure, Sim};

impl Sim {
    pub(crate) fn enqueue(&mut self) -> Result<(), Failure> {
        let i = self.rng.gen_range(0..PROJECTS);
        let project = format!("p{i}");
        let namespace = self.hosts[0]
            .config
            .projects
            .get(&project)
            .map(|p| p.namespace.clone())
            .unwrap_or_else(|| "default".into());
        let new = NewRun {
            project,
            namespace,
            priority: self.rng.gen_range(0..3),
            trigger: Trigger::Manual,
            occurrence: None,
            not_before: 0,
            args: Vec::new(),
            env: Vec::new(),
            rerun_of: None,
            hook_of: None,
        };
        let id = match self.store.enqueue(&new, self.now) {
            Ok(id) => id,
            Err(e) if e.is_busy() && self.foreign.is_some() => return Ok(()),
            Err(e) => return Err(self.violation(format!("an enqueue failed: {e}"))),
        };
        self.enqueued.push(id);
        self.summary.runs += 1;
        Ok(())
    }

    pub(crate) fn cancel(&mut self) -> Result<(), Failure> {
        if self.enqueued.is_empty() {
            return Ok(());
        }
        let id = self.enqueued[self.rng.gen_range(0..self.enqueued.len())];
        match self.store.request_cancel(id, "simulated", self.now) {
            Ok(store::CancelOutcome::Cancelled) => {
                self.checks.cancelled_queued.insert(id);
                self.checks.cancel_accepted.insert(id);
                Ok(())
            }
            Ok(store::CancelOutcome::Requested) => {
                self.checks.cancel_accepted.insert(id);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) if e.is_busy() && self.foreign.is_some() => Ok(()),
            Err(e) => Err(self.violation(format!("a cancel of run {id} failed: {e}"))),
        }
    }

    pub(crate) fn pause_or_resume(&mut self) -> Result<(), Failure> {
        let namespace = self.rng.gen_bool(0.5);
        let name = if namespace {
            match self.shape.namespaces.first() {
                Some(_) if self.rng.gen_bool(0.5) => "a".to_string(),
                Some(_) => "b".to_string(),
                None => "default".to_string(),
            }
        } else {
            format!("p{}", self.rng.gen_range(0..PROJECTS))
        };
        let kind = if namespace {
            HoldKind::Namespace
        } else {
            HoldKind::Project
        };
        let key = (namespace, name.clone());
        let resume = self.paused.contains(&key);
        let result = if resume {
            self.store.resume(kind, &name).map(|_| ())
        } else {
            self.store.pause(kind, &name, None, self.now).map(|_| ())
        };
        match result {
            Ok(()) if resume => {
                self.paused.remove(&key);
                Ok(())
            }
            Ok(()) => {
                self.paused.insert(key);
                Ok(())
            }
            Err(e) if e.is_busy() && self.foreign.is_some() => Ok(()),
            Err(e) => Err(self.violation(format!("a pause or resume failed: {e}"))),
        }
    }

    /// The caps are edited on every host's fleet.toml at once; each daemon reloads it before
    /// its next EVAL.
    pub(crate) fn edit_caps(&mut self) -> Result<(), Failure> {
        self.shape = self.shape.redraw_caps(&mut self.rng);
        self.write_configs()?;
        self.fault("caps edited");
        Ok(())
    }

    /// Every host's fleet.toml written again from the shape; each daemon reloads it before
    /// its next EVAL.
    pub(crate) fn write_configs(&mut self) -> Result<(), Failure> {
        let url = self._database.as_ref().map(|d| d.url.clone());
        for (i, host) in self.hosts.iter_mut().enumerate() {
            let text = self.shape.toml(&host.state_dir, i, url.as_deref());
            let config = Config::parse(&text, &host.config_path)
                .map_err(|e| setup(format!("the simulated fleet.toml: {e}")))?;
            host.config = Arc::new(config);
            if let Some(d) = host.daemon.as_mut() {
                d.reload(host.config.clone());
            }
        }
        Ok(())
    }
}
