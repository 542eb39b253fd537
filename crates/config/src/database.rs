//! The `database` key: which database holds the queue and the history. Absent, it is SQLite in
//! the state directory (`fleet.db`); set, a PostgreSQL URL. Run folders, the daemon lock and the
//! control socket stay in the state directory either way.
//!
//! The URL may carry a password, so a [`DatabaseUrl`] never shows it: its `Debug` and `Display`
//! print only what [`store::describe_postgres_url`] keeps (host, port, database, user).

use std::fmt;

/// A checked `postgresql://` URL. Only [`DatabaseUrl::secret_url`] gives the full text back.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    url: String,
    target: String,
}

impl DatabaseUrl {
    /// Checks `url` without connecting.
    ///
    /// Errors: a one-line reason that never repeats the URL (see [`store::describe_postgres_url`]).
    pub fn parse(url: &str) -> Result<DatabaseUrl, String> {
        let target = store::describe_postgres_url(url)?;
        Ok(DatabaseUrl {
            url: url.to_string(),
            target,
        })
    }

    /// The URL as written, password included: for connecting, never for a message or a log.
    pub fn secret_url(&self) -> &str {
        &self.url
    }

    /// The database for messages and logs: host, port, database and user, no password.
    pub fn target(&self) -> &str {
        &self.target
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({})", self.target)
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_never_shows() {
        let u = DatabaseUrl::parse("postgresql://fleet:hunter2@db.example:5433/jobs").unwrap();
        assert!(!format!("{u} {u:?}").contains("hunter2"), "{u:?}");
        assert!(u.target().contains("jobs"), "{u}");
        assert_eq!(
            u.secret_url(),
            "postgresql://fleet:hunter2@db.example:5433/jobs"
        );
    }

    #[test]
    fn bad_urls_are_refused_without_echoing_them() {
        for bad in [
            "mysql://x:hunter2@h/db",
            "host=/tmp dbname=x password=hunter2",
            "postgresql://x:hunter2@h:notaport/db",
        ] {
            let e = DatabaseUrl::parse(bad).unwrap_err();
            assert!(!e.contains("hunter2"), "{bad}: {e}");
        }
        assert!(DatabaseUrl::parse("postgresql:///jobs?host=/run/postgresql").is_ok());
    }

    #[test]
    fn tls_settings_are_checked_before_any_connection() {
        for ok in ["disable", "prefer", "require"] {
            let url = format!("postgresql://x:hunter2@h/db?sslmode={ok}");
            assert!(DatabaseUrl::parse(&url).is_ok(), "{url}");
        }
        let url = "postgresql://x:hunter2@h/db?connect_timeout=5&sslmode=allow";
        let e = DatabaseUrl::parse(url).unwrap_err();
        assert!(e.contains("sslmode=allow") && !e.contains("hunter2"), "{e}");
        // A CA file that is not there is named, at load: by the check `Config::load` makes of
        // this host's own file (the URL alone is well formed).
        let url = "postgresql://x:hunter2@h/db?sslmode=verify-full&sslrootcert=/nowhere/ca.crt";
        assert!(DatabaseUrl::parse(url).is_ok());
        let e = store::check_postgres_tls_files(url).unwrap_err();
        assert!(
            e.contains("sslrootcert /nowhere/ca.crt: no such file"),
            "{e}"
        );
        assert!(!e.contains("hunter2") && !e.contains('\n'), "{e}");
    }
}
