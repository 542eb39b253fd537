//! Each project's runs summed up (`fleet projects`), for PostgreSQL: two passes over the runs
//! table, never used by an EVAL.

use std::collections::BTreeMap;

use super::runs::{collect_rows, RUN_COLUMNS};
use super::PgStore;
use crate::error::Result;
use crate::ProjectActivity;

impl PgStore {
    /// [`crate::Store::project_activity`].
    pub(crate) fn project_activity(&self) -> Result<Vec<ProjectActivity>> {
        let mut conn = self.conn()?;
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
        let counts = conn.query(
            "SELECT project, count(*) FILTER (WHERE status = 'queued'), \
               count(*) FILTER (WHERE status IN ('starting','running')) \
             FROM runs WHERE status IN ('queued','starting','running') GROUP BY project",
            &[],
        )?;
        for r in counts {
            let project: String = r.try_get(0)?;
            let a = entry(&mut by_project, &project);
            a.queued = r.try_get::<_, i64>(1)?.max(0) as u64;
            a.active = r.try_get::<_, i64>(2)?.max(0) as u64;
        }
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id IN (SELECT MAX(id) FROM runs \
             WHERE status IN ('succeeded','failed','timed_out','cancelled','lost') GROUP BY project)"
        );
        let ended = collect_rows(conn.query(&sql, &[])?)?;
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
