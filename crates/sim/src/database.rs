//! The PostgreSQL database a many-hosts simulation runs on: made for it on the server it is
//! given, empty, and dropped when it ends, so that every run (and every replay) starts from
//! nothing and leaves nothing behind. A run killed before its end leaves its database: the
//! next run on this machine drops those of simulations whose process is gone.

/// A database made for one simulation.
pub(crate) struct SimDatabase {
    /// The server's URL as given (its own database is where the new one is made from).
    server: String,
    /// The new database's name.
    name: String,
    /// The URL of the new database: the server's, naming it.
    pub(crate) url: String,
    /// The server's clock when the database was made (ms UTC): a many-hosts simulation's
    /// clock starts at the next whole minute, since the server judges some liveness by its
    /// own clock (`clock_timestamp()`), never by its callers'.
    pub(crate) server_now: i64,
}

/// What the databases of simulations are named: this, the pid of the process that made it,
/// and a number.
const PREFIX: &str = "fleet_sim_";

impl SimDatabase {
    /// Makes a new, empty database on the server `server` (a `postgresql://` URL).
    ///
    /// Errors: the URL cannot be read, or the server refuses, in words.
    pub(crate) fn create(server: &str) -> Result<SimDatabase, String> {
        let name = format!(
            "{PREFIX}{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let url = with_database(server, &name)?;
        let mut admin = connect(server)?;
        drop_leftovers(&mut admin);
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(|e| format!("cannot create a database for the simulation: {}", chain(&e)))?;
        let server_now: i64 = admin
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )
            .map_err(|e| format!("cannot read the server's clock: {}", chain(&e)))?
            .get(0);
        Ok(SimDatabase {
            server: server.to_string(),
            name,
            url,
            server_now,
        })
    }
}

/// A connection to the server at `url`, waiting at most 10 s for it.
fn connect(url: &str) -> Result<postgres::Client, String> {
    let mut config: postgres::Config = url
        .parse()
        .map_err(|e| format!("--database: {}", chain(&e)))?;
    config.connect_timeout(std::time::Duration::from_secs(10));
    config
        .connect(postgres::NoTls)
        .map_err(|e| format!("cannot connect to the PostgreSQL server: {}", chain(&e)))
}

/// An error and its causes, on one line (the driver's own says only "db error").
fn chain(e: &dyn std::error::Error) -> String {
    let mut words = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        words.push_str(": ");
        words.push_str(&s.to_string());
        source = s.source();
    }
    words
}

/// Drops the databases simulations on this machine made and left (their process was killed
/// before it could drop them): those whose pid no process has now. Best effort.
fn drop_leftovers(admin: &mut postgres::Client) {
    let Ok(rows) = admin.query(
        "SELECT datname FROM pg_database WHERE datname LIKE 'fleet\\_sim\\_%'",
        &[],
    ) else {
        return;
    };
    for row in rows {
        let name: String = row.get(0);
        let pid = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('_').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        }
    }
}

impl Drop for SimDatabase {
    fn drop(&mut self) {
        if let Ok(mut admin) = connect(&self.server) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// `url` (a `postgresql://` or `postgres://` URL) naming the database `name` instead of its
/// own: the path after the authority is replaced, the query kept but for a `dbname`, which
/// would name another database.
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
    let kept: Vec<&str> = query
        .trim_start_matches('?')
        .split('&')
        .filter(|kv| !kv.is_empty() && !kv.starts_with("dbname="))
        .collect();
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
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
        assert_eq!(
            with_database("postgresql://u@/postgres?dbname=postgres&host=/tmp", "n").unwrap(),
            "postgresql://u@/n?host=/tmp"
        );
        assert!(with_database("host=/tmp", "n").is_err());
    }
}
