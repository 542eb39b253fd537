//! Per-project summaries for `fleet projects`: queued and active counts, and the latest ended
//! run. Read-only.

use std::collections::BTreeMap;

use super::runs::{collect_rows, RUN_COLUMNS};
use super::SqliteStore;
use crate::error::Result;
use crate::ProjectActivity;

impl SqliteStore {
    /// [`crate::Store::project_activity`]: two queries, each one pass over the runs table.
    pub(crate) fn project_activity(&self) -> Result<Vec<ProjectActivity>> {
        let conn = self.conn()?;
        let mut by_project: BTreeMap<String, ProjectActivity> = BTreeMap::new();
        fn entry<'m>(
            m: &'m mut BTreeMap<String, ProjectActivity>,
            p: &str,
        ) -> &'m mut ProjectActivity {
            m.entry(p.to_string()).or_insert_with(|| ProjectActivity {
                project: p.to_string(),
                queued: 0,
                active: 0,
                last_ended: None,
                last_ended_unreadable: None,
            })
        }
        let mut stmt = conn.prepare_cached(
            "SELECT project, SUM(status = 'queued'), SUM(status IN ('starting','running')) \
             FROM runs WHERE status IN ('queued','starting','running') GROUP BY project",
        )?;
        let counts = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for (project, queued, active) in counts {
            let a = entry(&mut by_project, &project);
            a.queued = queued.max(0) as u64;
            a.active = active.max(0) as u64;
        }
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id IN (SELECT MAX(id) FROM runs \
             WHERE status IN ('succeeded','failed','timed_out','cancelled','lost') GROUP BY project)"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let ended = collect_rows(&mut stmt, [])?;
        for run in ended.runs {
            let project = run.project.clone();
            entry(&mut by_project, &project).last_ended = Some(run);
        }
        // A row fleet cannot read is named apart: the caller says which.
        for bad in ended.unreadable {
            let project = bad.project.clone();
            entry(&mut by_project, &project).last_ended_unreadable = Some(bad);
        }
        Ok(by_project.into_values().collect())
    }
}
