//! The PostgreSQL database a many-hosts simulation runs on: made for it on the server it is
//! given, empty, and dropped when it ends, so that every run (and every replay) starts from
//! nothing and leaves nothing behind.

/// A database made for one simulation.
pub(crate) struct SimDatabase {
    /// The server's URL as given (its own database is where the new one is made from).
    server: String,
    /// The new database's name.
    name: String,
    /// The URL of the new database: the server's, naming it.
    pub(crate) url: String,
}

impl SimDatabase {
    /// Makes a new, empty database on the server `server` (a `postgresql://` URL).
    ///
    /// Errors: the URL cannot be read, or the server refuses, in words.
    pub(crate) fn create(server: &str) -> Result<SimDatabase, String> {
        let name = format!(
            "fleet_sim_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let url = with_database(server, &name)?;
        let mut admin = postgres::Client::connect(server, postgres::NoTls)
            .map_err(|e| format!("cannot connect to the PostgreSQL server: {e}"))?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(|e| format!("cannot create a database for the simulation: {e}"))?;
        Ok(SimDatabase {
            server: server.to_string(),
            name,
            url,
        })
    }
}

impl Drop for SimDatabase {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&self.server, postgres::NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// `url` (a `postgresql://` or `postgres://` URL) naming the database `name` instead of its
/// own: the path after the authority is replaced, the query kept.
fn with_database(url: &str, name: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("postgresql://")
        .or_else(|| url.strip_prefix("postgres://"))
        .ok_or_else(|| "--database: not a postgresql:// URL".to_string())?;
    let scheme = &url[..url.len() - rest.len()];
    let (before_query, query) = match rest.find('?') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let authority = before_query.split('/').next().unwrap_or_default();
    Ok(format!("{scheme}{authority}/{name}{query}"))
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn the_database_of_a_url_is_replaced_and_its_query_kept() {
        assert_eq!(
            with_database("postgresql://u@/postgres?host=/tmp/x&port=5", "n").unwrap(),
            "postgresql://u@/n?host=/tmp/x&port=5"
        );
        assert_eq!(
            with_database("postgres://u:p@db:5432", "n").unwrap(),
            "postgres://u:p@db:5432/n"
        );
        assert!(with_database("host=/tmp", "n").is_err());
    }
}
