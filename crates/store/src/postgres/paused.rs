//! Pauses, for PostgreSQL: holding a project or a namespace, and the check the claim and a
//! schedule's step make inside their own transaction.

use postgres::Transaction;

use super::PgStore;
use crate::error::Result;
use crate::{HoldKind, Millis, Pause, Pauses};

impl PgStore {
    /// [`crate::Store::pause`].
    pub(crate) fn pause(
        &self,
        kind: HoldKind,
        name: &str,
        by: Option<&str>,
        now: Millis,
    ) -> Result<bool> {
        let mut conn = self.conn()?;
        let n = conn.execute(
            "INSERT INTO paused (kind, name, since, by) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (kind, name) DO NOTHING",
            &[&kind.as_str(), &name, &now, &by],
        )?;
        Ok(n == 1)
    }

    /// [`crate::Store::resume`].
    pub(crate) fn resume(&self, kind: HoldKind, name: &str) -> Result<bool> {
        let mut conn = self.conn()?;
        let n = conn.execute(
            "DELETE FROM paused WHERE kind = $1 AND name = $2",
            &[&kind.as_str(), &name],
        )?;
        Ok(n == 1)
    }

    /// [`crate::Store::paused`].
    pub(crate) fn paused(&self) -> Result<Pauses> {
        let mut conn = self.conn()?;
        let rows = conn.query(
            "SELECT kind, name, since, by FROM paused ORDER BY kind, name",
            &[],
        )?;
        let pauses = rows
            .iter()
            .map(|r| {
                let kind: String = r.try_get(0)?;
                Ok(Pause {
                    // The CHECK constraint admits only the two words.
                    kind: HoldKind::parse(&kind).unwrap_or(HoldKind::Project),
                    name: r.try_get(1)?,
                    since: r.try_get(2)?,
                    by: r.try_get(3)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Pauses(pauses))
    }
}

/// What holds `project` in `namespace` right now, read inside the caller's transaction: the
/// project's own pause first, else its namespace's; `None` when neither is paused.
pub(super) fn held_by(
    tx: &mut Transaction<'_>,
    project: &str,
    namespace: &str,
) -> Result<Option<HoldKind>> {
    let kind: Option<String> = tx
        .query_opt(
            "SELECT kind FROM paused WHERE (kind = 'project' AND name = $1) \
               OR (kind = 'namespace' AND name = $2) ORDER BY kind DESC LIMIT 1",
            &[&project, &namespace],
        )?
        .map(|r| r.try_get(0))
        .transpose()?;
    Ok(kind.as_deref().and_then(HoldKind::parse))
}
