//! Whether a store opened for reading only may read a database as it is, from the schema
//! version the database holds and the newest this build knows. Such a store never migrates
//! (it may not, or must not, write), so a schema that is not exactly this build's is refused:
//! a newer one as for any open, an older or missing one with what brings it up to date. Both
//! backends' read-only opens ask here, after reading the version their own way.

use crate::error::Result;
use crate::StoreError;

/// Whether a read-only store may read a database whose schema is at version `found` (0: no
/// fleet schema at all) when this build knows versions up to `known`.
///
/// Errors: [`StoreError::SchemaTooNew`] above `known`; [`StoreError::SchemaBehind`] below.
pub(crate) fn for_reading(found: i64, known: i64) -> Result<()> {
    if found > known {
        Err(StoreError::SchemaTooNew { found, known })
    } else if found < known {
        Err(StoreError::SchemaBehind { found, known })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_builds_version_is_read() {
        assert!(for_reading(3, 3).is_ok());
        assert!(matches!(
            for_reading(4, 3),
            Err(StoreError::SchemaTooNew { found: 4, known: 3 })
        ));
        assert!(matches!(
            for_reading(2, 3),
            Err(StoreError::SchemaBehind { found: 2, known: 3 })
        ));
        assert!(matches!(
            for_reading(0, 3),
            Err(StoreError::SchemaBehind { found: 0, known: 3 })
        ));
    }

    /// The words say what to do, on one line, and tell a missing schema from an old one.
    #[test]
    fn an_old_or_missing_schema_says_what_brings_it_up_to_date() {
        let old = for_reading(1, 2).unwrap_err().to_string();
        assert!(
            old.contains("version 1, older than this fleet's (2)"),
            "{old}"
        );
        assert!(
            old.contains("start a daemon, or a command that writes"),
            "{old}"
        );
        let missing = for_reading(0, 2).unwrap_err().to_string();
        assert!(missing.contains("no fleet schema"), "{missing}");
        assert!(missing.contains("may create it"), "{missing}");
        for m in [old, missing] {
            assert!(!m.contains('\n'), "{m}");
        }
    }
}
