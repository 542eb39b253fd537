//! The SQLite schema, as an ordered list of migrations (rusqlite_migration keeps the version in
//! SQLite's `user_version`).
//!
//! It owns every table, index and trigger definition: version 1, `schema.sql`, creates them
//! all. Once a version has shipped, never edit it (a database already past it would never see
//! the edit): append a migration to [`ALL`].

use rusqlite_migration::{Migrations, M};

/// Version 1: every table, index and trigger (see `schema.sql`, grouped by table).
pub(crate) const V1: &str = include_str!("schema.sql");

/// Every migration's SQL, oldest first. Version N is `ALL[N - 1]`.
const ALL: &[&str] = &[V1];

/// The newest schema version this build knows: the number of migrations, as `user_version`
/// holds it once they have all run.
pub(crate) fn known_version() -> i64 {
    ALL.len() as i64
}

/// [`known_version`], as rusqlite_migration names it.
pub(crate) fn latest() -> rusqlite_migration::SchemaVersion {
    rusqlite_migration::SchemaVersion::Inside(
        std::num::NonZeroUsize::new(ALL.len()).expect("at least one migration"),
    )
}

/// All migrations, oldest first.
pub(crate) fn migrations() -> Migrations<'static> {
    Migrations::new(ALL.iter().map(|sql| M::up(sql)).collect())
}

#[cfg(test)]
mod tests {
    use crate::ALL_STATUSES;

    #[test]
    fn migrations_are_valid() {
        super::migrations().validate().unwrap();
    }

    /// Register check: the schema's CHECK constraint lists exactly the statuses of the enum.
    #[test]
    fn schema_lists_every_status() {
        for st in ALL_STATUSES {
            assert!(super::V1.contains(&format!("'{}'", st.as_str())), "{st}");
        }
    }

    /// Register check: the schema's CHECK constraint lists exactly the triggers of the enum.
    #[test]
    fn schema_lists_every_trigger() {
        for t in crate::ALL_TRIGGERS {
            assert!(super::V1.contains(&format!("'{}'", t.as_str())), "{t:?}");
        }
    }
}
