//! Pauses (`fleet pause`, `fleet resume`) for SQLite: the `paused` table, and [`held_by`], the
//! check the claim and the schedule's firing make inside their own transactions.

use rusqlite::{params, Connection, OptionalExtension};

use super::SqliteStore;
use crate::error::Result;
use crate::{HoldKind, Millis, Pause, Pauses};

impl SqliteStore {
    /// [`crate::Store::pause`].
    pub(crate) fn pause(
        &self,
        kind: HoldKind,
        name: &str,
        by: Option<&str>,
        now: Millis,
    ) -> Result<bool> {
        let conn = self.conn()?;
        let n = conn.execute(
            "INSERT INTO paused (kind, name, since, by) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (kind, name) DO NOTHING",
            params![kind.as_str(), name, now, by],
        )?;
        Ok(n == 1)
    }

    /// [`crate::Store::resume`].
    pub(crate) fn resume(&self, kind: HoldKind, name: &str) -> Result<bool> {
        let conn = self.conn()?;
        let n = conn.execute(
            "DELETE FROM paused WHERE kind = ?1 AND name = ?2",
            params![kind.as_str(), name],
        )?;
        Ok(n == 1)
    }

    /// [`crate::Store::paused`].
    pub(crate) fn paused(&self) -> Result<Pauses> {
        let conn = self.conn()?;
        let mut stmt =
            conn.prepare_cached("SELECT kind, name, since, by FROM paused ORDER BY kind, name")?;
        let rows = stmt.query_map([], |r| {
            let kind: String = r.get(0)?;
            Ok(Pause {
                // The CHECK constraint admits only the two words.
                kind: HoldKind::parse(&kind).unwrap_or(HoldKind::Project),
                name: r.get(1)?,
                since: r.get(2)?,
                by: r.get(3)?,
            })
        })?;
        Ok(Pauses(rows.collect::<rusqlite::Result<_>>()?))
    }
}

/// What holds `project` in `namespace` right now, read on the caller's connection (inside its
/// transaction): `Some("project")` or `Some("namespace")`, or `None` when neither is paused.
pub(super) fn held_by(
    conn: &Connection,
    project: &str,
    namespace: &str,
) -> Result<Option<HoldKind>> {
    let kind: Option<String> = conn
        .prepare_cached(
            "SELECT kind FROM paused WHERE (kind = 'project' AND name = ?1) \
               OR (kind = 'namespace' AND name = ?2) ORDER BY kind DESC LIMIT 1",
        )?
        .query_row([project, namespace], |r| r.get(0))
        .optional()?;
    Ok(kind.as_deref().and_then(HoldKind::parse))
}
