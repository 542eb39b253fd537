//! The PostgreSQL schema, as an ordered list of migrations, and the one way to apply them.
//!
//! It owns every table, index, function and trigger definition for PostgreSQL: version 1,
//! `schema.sql`, creates them all. The version is kept in a table of its own,
//! `schema_version` (one row per applied migration). Once a version has shipped, never edit it
//! (a database already past it would never see the edit): append a migration to [`ALL`].
//!
//! The list is its own, not SQLite's; the tables are the same, plus what only a shared database
//! needs (the cap seats, the change notices).

use postgres::Client;

use crate::error::Result;
use crate::StoreError;

/// Version 1: every table, index, function and trigger (see `schema.sql`, grouped by table).
pub(crate) const V1: &str = include_str!("schema.sql");

/// Every migration's SQL, oldest first. Version N is `ALL[N - 1]`.
pub(crate) const ALL: &[&str] = &[V1];

/// The advisory lock key the migrations run under (any constant: "fleet" in ASCII). Two hosts
/// starting at once queue on it; the second finds the schema current.
const MIGRATION_LOCK: i64 = 0x0066_6c65_6574;

/// The newest version this build knows.
pub(crate) fn known_version() -> i64 {
    ALL.len() as i64
}

/// The schema version the database holds, 0 when it holds no fleet schema (or none this role
/// may see: a schema it has no `USAGE` on is left out of its search path). Reads only, takes no
/// lock: the tables and the version row of a migration are committed together, so a version
/// read here is one whose tables exist.
///
/// Errors: [`StoreError::Backend`] (a role without `SELECT` on `schema_version` is refused
/// here).
pub(crate) fn found_version(client: &mut Client) -> Result<i64> {
    let exists: bool = client
        .query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let found: i32 = client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])?
        .get(0);
    Ok(i64::from(found))
}

/// Brings the schema up to date. A schema that is current already is only read (no lock, no
/// `CREATE`), so a role that may read and write fleet's tables but not create any (an
/// operator's) opens it; otherwise, in ONE transaction under the advisory lock, reads the
/// version again (creating `schema_version` on a new database), applies every later migration
/// and records it.
///
/// Errors: [`StoreError::Backend`] for a failed statement (nothing is applied: the transaction
/// rolls back); [`StoreError::SchemaTooNew`] for a database written by a newer fleet.
pub(crate) fn migrate(client: &mut Client) -> Result<()> {
    let known = known_version();
    let found = found_version(client)?;
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    if found == known {
        return Ok(());
    }
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    // `CREATE … IF NOT EXISTS` on an existing table sends a NOTICE at every start: not news.
    tx.batch_execute("SET LOCAL client_min_messages = warning")?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_version (
             version    INTEGER PRIMARY KEY,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )?;
    let current: i32 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])?
        .get(0);
    if i64::from(current) > known {
        return Err(StoreError::SchemaTooNew {
            found: i64::from(current),
            known,
        });
    }
    for (i, sql) in ALL.iter().enumerate().skip(current as usize) {
        tx.batch_execute(sql)?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&(i as i32 + 1)],
        )?;
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Register check: the schema's CHECK constraints list every status and trigger.
    #[test]
    fn schema_lists_every_status_and_trigger() {
        for st in crate::ALL_STATUSES {
            assert!(super::V1.contains(&format!("'{}'", st.as_str())), "{st}");
        }
        for t in crate::ALL_TRIGGERS {
            assert!(super::V1.contains(&format!("'{}'", t.as_str())), "{t:?}");
        }
    }
}
