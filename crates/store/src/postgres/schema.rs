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

/// Brings the schema up to date: in ONE transaction under the advisory lock, reads the version
/// (creating `schema_version` on a new database), applies every later migration and records it.
///
/// Errors: [`StoreError::Backend`] for a failed statement (nothing is applied: the transaction
/// rolls back); [`StoreError::SchemaTooNew`] for a database written by a newer fleet.
pub(crate) fn migrate(client: &mut Client) -> Result<()> {
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
    let known = ALL.len() as i32;
    if current > known {
        return Err(StoreError::SchemaTooNew {
            found: i64::from(current),
            known: i64::from(known),
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
