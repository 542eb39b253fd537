//! Opening a PostgreSQL database: the connection settings, the migrations, the pool, and the
//! change probe's connection of its own.
//!
//! Every pooled connection gets its settings from the one `Config` built here (the busy timeout
//! as `lock_timeout`), so no statement runs without it. Nothing here reads or writes runs.

use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;
use r2d2_postgres::PostgresConnectionManager;

use super::timed::TimedManager;
use super::{schema, PgStore};
use crate::decide::schema::for_reading;
use crate::error::Result;
use crate::StoreError;

/// The notice channel every commit that changes a table sends on (see `schema`).
const CHANNEL: &str = "fleet_changes";

/// The longest a pooled connection's statement may run before the server cancels it: every
/// statement fleet runs on the pool is a short one (prune deletes in small transactions), so
/// one running longer means a server in trouble, which then surfaces as an error the daemon's
/// outage path handles instead of a wait without end.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// TCP keepalives and the TCP user timeout, so that a server gone silent behind a network that
/// drops packets (no reset ever comes) fails the connection within about
/// [`TCP_USER_TIMEOUT`] instead of leaving a read waiting for ever; and the server's notices
/// (`NOTICE`/`WARNING` messages such as "relation already exists") go to the DEBUG log, not
/// to the operator. On a unix socket the TCP settings do nothing: the statement timeout and the
/// pool's check-out test (`timed`) bound the waits there.
fn bound_waits(config: &mut postgres::Config) {
    config
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(10))
        .keepalives_interval(Duration::from_secs(5))
        .keepalives_retries(3)
        .tcp_user_timeout(TCP_USER_TIMEOUT)
        .notice_callback(|notice| {
            tracing::debug!(
                severity = notice.severity(),
                "PostgreSQL server said: {}",
                notice.message()
            )
        });
}

/// How long opening the database (connect, log in, migrate) may take before it counts as
/// failed. The driver bounds only the socket's connect: a server whose processes are stopped
/// accepts the connection in the kernel and then never answers, and a command must fail with a
/// one-line error, not wait for ever. (The thread that waits is left to finish or hang on its
/// own: it holds nothing but its connection.)
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the first connection failed.
enum OpenFailed {
    Connect(super::PgError),
    Migrate(StoreError),
}

impl From<super::PgError> for OpenFailed {
    fn from(e: super::PgError) -> OpenFailed {
        OpenFailed::Connect(e)
    }
}

/// How long sent data may stay unacknowledged before the kernel drops the connection.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// The database a config names, for messages: host, port, database and user, never the
/// password.
fn describe(config: &postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let mut ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    // No port given: the driver's (and PostgreSQL's) default, said rather than left blank.
    if ports.is_empty() {
        ports.push("5432".into());
    }
    format!(
        "postgresql {} on {}:{} as {}",
        config.get_dbname().unwrap_or("(default)"),
        hosts.join(","),
        ports.join(","),
        config.get_user().unwrap_or("(default)")
    )
}

/// Reads the files the TLS settings of the connection string `url` name (the CA file, the
/// client certificate, its key with libpq's permissions), as a connection would, without
/// connecting: for a host's own config at load, where a missing file or a key others may read
/// is said before the first connection. Not part of [`describe_url`], which also checks texts
/// other hosts published, whose files are theirs.
///
/// Errors: a one-line reason naming the setting and the file.
pub fn check_tls_files(url: &str) -> std::result::Result<(), String> {
    let (_, tls) = super::tls::split(url)?;
    super::tls::connector(&tls).map(|_| ())
}

/// Checks a `database` setting without connecting: a `postgresql://` (or `postgres://`) URL the
/// driver can read, whose percent-escapes are well formed, whose `connect_timeout`, if any,
/// is a whole number of seconds of at least 1, and whose TLS settings are libpq's (the files
/// they name are [`check_tls_files`]'s). Returns the database it names for messages and logs
/// (host, port, database, user; never the password).
///
/// Errors: a one-line reason, which never repeats the URL (it may hold a password).
pub fn describe_url(url: &str) -> std::result::Result<String, String> {
    let Some(parts) = super::url::cut(url) else {
        return Err("expected a postgresql:// URL".into());
    };
    // libpq's TLS settings, which fleet reads itself (the driver knows only some of them).
    let (driver_url, _) = super::tls::split(url)?;
    // What the driver would take without a word: a malformed percent-escape (kept as
    // written), a `connect_timeout` that is not a number of seconds.
    super::url::check(url, &parts)?;
    let config: postgres::Config = driver_url
        .parse()
        .map_err(|e: postgres::Error| format!("not a PostgreSQL URL: {}", super::PgError(e)))?;
    if config.get_hosts().is_empty() {
        return Err("the URL names no host (give one, or ?host=/socket/folder)".into());
    }
    // A password holding a bare `@` leaves the rest of it in the host name, which every
    // message would then show: refused, saying nothing of it.
    if config
        .get_hosts()
        .iter()
        .any(|h| matches!(h, postgres::config::Host::Tcp(name) if name.contains('@')))
    {
        return Err(
            "the host holds an `@`: an `@` in the user name or password must be \
             written %40"
                .into(),
        );
    }
    // One port for every host, or one each: the driver refuses anything else only when it
    // connects (a `?port=` is added to the URL's own, not put in its place).
    let (hosts, ports) = (config.get_hosts().len(), config.get_ports().len());
    if ports > 1 && ports != hosts {
        return Err(format!(
            "the URL names {hosts} host(s) and {ports} ports: give one port for all, or one per \
             host (a ?host= or ?port= parameter adds to the URL's own, it does not replace it)"
        ));
    }
    // The driver takes port 0, where no server can listen: it would fail only at the first
    // connection, as "connection refused".
    if config.get_ports().contains(&0) {
        return Err("port 0 names no server; give the server's port (5432 by default)".into());
    }
    Ok(describe(&config))
}

/// What a store opened on a database may do to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Read and write, and bring the schema up to date first (the daemon, the commands that
    /// write).
    Migrate,
    /// Read only: the schema is checked, never migrated, and every session runs with
    /// `default_transaction_read_only`, so that no statement can write (the commands that
    /// only read). Works with a role that has only `SELECT` on fleet's tables.
    ReadOnly,
}

/// The settings every session of a store starts with (`-c` options, set at connection start,
/// so that no statement runs without them): the busy timeout as `lock_timeout`; with
/// `statement_timeout`, that too (the pool's sessions only: a migration may take longer);
/// and for [`Access::ReadOnly`], `default_transaction_read_only`.
fn session_options(
    busy_timeout: Duration,
    statement_timeout: Option<Duration>,
    access: Access,
) -> String {
    let mut options = format!("-c lock_timeout={}", busy_timeout.as_millis().max(1));
    if let Some(limit) = statement_timeout {
        options += &format!(" -c statement_timeout={}", limit.as_millis());
    }
    if access == Access::ReadOnly {
        options += " -c default_transaction_read_only=on";
    }
    options
}

impl PgStore {
    /// Connects to the database `url` names (a `postgresql://` URL or `key=value` pairs), brings
    /// its schema up to date, and builds a pool whose statements wait at most `busy_timeout` for
    /// a lock.
    ///
    /// Errors: [`StoreError::Connect`] when the string cannot be read, the server cannot be
    /// reached, or a migration fails; [`StoreError::SchemaTooNew`].
    pub(crate) fn open(url: &str, busy_timeout: Duration) -> Result<PgStore> {
        PgStore::open_with(url, busy_timeout, Access::Migrate)
    }

    /// Connects to the database `url` names for reading only: its schema must be this build's
    /// (it is read, never created nor migrated), and every session of the store, the change
    /// probe's included, runs with `default_transaction_read_only = on`, so that nothing it
    /// runs can write. Takes no lock and creates nothing: a role with `SELECT` on fleet's tables
    /// (and `USAGE` on their schema) is enough.
    ///
    /// Errors: [`StoreError::Connect`] when the string cannot be read or the server cannot be
    /// reached (or refuses this role the version); [`StoreError::SchemaTooNew`];
    /// [`StoreError::SchemaBehind`] for a schema older than this build's, or none.
    pub(crate) fn open_read_only(url: &str, busy_timeout: Duration) -> Result<PgStore> {
        PgStore::open_with(url, busy_timeout, Access::ReadOnly)
    }

    /// [`PgStore::open`] or [`PgStore::open_read_only`], as `access` says.
    fn open_with(url: &str, busy_timeout: Duration, access: Access) -> Result<PgStore> {
        let bad = |target: String| {
            move |e: Box<dyn std::error::Error + Send + Sync>| StoreError::Connect {
                target,
                source: e,
            }
        };
        let (driver_url, tls) =
            super::tls::split(url).map_err(|e| bad("(connection string)".into())(e.into()))?;
        let mut config: postgres::Config = driver_url.parse().map_err(|e: postgres::Error| {
            bad("(connection string)".into())(Box::new(super::PgError(e)))
        })?;
        let target = describe(&config);
        // The TLS mode as fleet read it: `require` and the `verify-*` modes are the driver's
        // `require`, which never falls back to a plain connection.
        config.ssl_mode(tls.mode.driver());
        let connector = super::tls::connector(&tls).map_err(|e| bad(target.clone())(e.into()))?;
        // The busy timeout: a statement that waits longer for a lock fails as busy and its
        // transaction rolls back. Set at connection start, so every pooled connection has it.
        config.options(&session_options(busy_timeout, None, access));
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        bound_waits(&mut config);
        // One connection first, outside the pool: a server that cannot be reached (or whose
        // certificate is refused) fails here at once with the driver's words, instead of after
        // the pool's connection timeout.
        let first = config.clone();
        let first_tls = connector.clone();
        let (tx, answered) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("fleet-pg-open".into())
            .spawn(move || {
                let result = (|| {
                    let mut client = first.connect(first_tls).map_err(super::PgError)?;
                    match access {
                        Access::Migrate => schema::migrate(&mut client),
                        Access::ReadOnly => schema::found_version(&mut client)
                            .and_then(|found| for_reading(found, schema::known_version())),
                    }
                    .map_err(OpenFailed::Migrate)?;
                    Ok::<Client, OpenFailed>(client)
                })();
                // The receiver is gone if it stopped waiting: then nobody wants the answer.
                let _ = tx.send(result);
            })
            .map_err(|e| bad(target.clone())(Box::new(e)))?;
        match answered.recv_timeout(OPEN_TIMEOUT).ok() {
            Some(Ok(client)) => drop(client),
            Some(Err(OpenFailed::Migrate(
                e @ (StoreError::SchemaTooNew { .. } | StoreError::SchemaBehind { .. }),
            ))) => return Err(e),
            // Lost or busy on the way: tried again, as a server not reached. Refused by the
            // server (a role that may not create the tables): said as such, and final.
            Some(Err(OpenFailed::Migrate(e))) if e.is_unreachable() || e.is_busy() => {
                return Err(bad(target)(Box::new(e)))
            }
            Some(Err(OpenFailed::Migrate(e))) => {
                return Err(StoreError::Migrate {
                    target,
                    source: Box::new(e),
                })
            }
            Some(Err(OpenFailed::Connect(e))) => return Err(bad(target)(Box::new(e))),
            None => {
                return Err(bad(target)(
                    format!(
                        "the server accepted the connection but did not answer within {} s",
                        OPEN_TIMEOUT.as_secs()
                    )
                    .into(),
                ))
            }
        }
        // The statement timeout, for the pool only: a migration may legitimately take longer
        // on a large database, and it ran above without one.
        let mut pooled = config.clone();
        pooled.options(&session_options(
            busy_timeout,
            Some(STATEMENT_TIMEOUT),
            access,
        ));
        let manager = TimedManager(PostgresConnectionManager::new(pooled, connector.clone()));
        let pool = r2d2::Pool::builder()
            .max_size(4)
            .min_idle(Some(1))
            // A server that went away is noticed within this long by any operation (the pool
            // keeps trying to connect meanwhile), and the daemon's loop waits no longer on it.
            .connection_timeout(Duration::from_secs(5))
            // The pool's own failures to connect reach the caller as `StoreError::Unreachable`,
            // which logs them once per outage: not one line per attempt of the pool's.
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build(manager)
            .map_err(|e| bad(target)(Box::new(e)))?;
        Ok(PgStore {
            pool: std::sync::Arc::new(super::PoolOwner::new(pool)),
            config: std::sync::Arc::new(config),
            tls: connector,
        })
    }

    /// A change probe on this database: a new connection, outside the pool, listening on the
    /// change channel.
    ///
    /// Errors: [`StoreError::Backend`] if the server cannot be reached.
    pub(crate) fn change_probe(&self) -> Result<PgProbe> {
        let config = (*self.config).clone();
        let tls = self.tls.clone();
        let (tx, answered) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("fleet-pg-probe".into())
            .spawn(move || {
                let _ = tx.send(config.connect(tls).map_err(super::PgError));
            })
            .map_err(|e| StoreError::Unreachable {
                context: "database change probe",
                source: Box::new(e),
            })?;
        // Bounded: a server that accepts the connection but never answers (its processes
        // stopped) would otherwise hold the daemon's loop here for ever.
        let mut conn = match answered.recv_timeout(super::timed::CHECK_TIMEOUT) {
            Ok(result) => result.map_err(|e| e.0)?,
            Err(_) => {
                return Err(StoreError::Unreachable {
                    context: "database change probe",
                    source: format!(
                        "the server did not answer within {} s",
                        super::timed::CHECK_TIMEOUT.as_secs()
                    )
                    .into(),
                })
            }
        };
        conn.batch_execute(&format!("LISTEN {CHANNEL}"))?;
        Ok(PgProbe {
            conn: Some(conn),
            first: true,
        })
    }
}

/// The change probe of [`crate::ChangeProbe`] for PostgreSQL: a connection of its own that
/// listens on the channel every committed change sends a notice on (a trigger per table, see
/// `schema`), whoever committed it. A look reads the notices already arrived and never waits.
pub(crate) struct PgProbe {
    /// `Some` until dropped (see the `Drop` impl).
    conn: Option<Client>,
    first: bool,
}

impl PgProbe {
    /// True if a commit happened since the previous call (always true on the first call).
    ///
    /// Errors: the driver's, if the connection is gone.
    pub(crate) fn changed(&mut self) -> Result<bool> {
        // A notice is only read off the socket when the connection is used: a round trip
        // makes sure every notice sent before it is in the buffer. Bounded in time: a server
        // that stopped answering must fail the look (the daemon's outage path), not hang it.
        let conn = self
            .conn
            .as_mut()
            .expect("the probe's connection lives until drop");
        conn.is_valid(super::timed::CHECK_TIMEOUT)?;
        let mut seen = false;
        let mut pending = conn.notifications();
        let mut it = pending.iter();
        while it.next()?.is_some() {
            seen = true;
        }
        let first = std::mem::replace(&mut self.first, false);
        Ok(first || seen)
    }
}

impl Drop for PgProbe {
    /// Closes the connection on a thread of its own: closing a `postgres` client panics on a
    /// thread that drives an async runtime (see `PoolOwner`).
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if let Ok(closer) = std::thread::Builder::new()
                .name("fleet-pg-close".into())
                .spawn(move || drop(conn))
            {
                let _ = closer.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::describe_url;

    /// A database is named by host, port, database and user — the port said even when the
    /// URL leaves it to the default, on a unix socket too — and never by its password.
    #[test]
    fn a_database_is_named_without_its_password_and_with_its_port() {
        assert_eq!(
            describe_url("postgresql://fleet:secret@db.internal/jobs").unwrap(),
            "postgresql jobs on db.internal:5432 as fleet"
        );
        assert_eq!(
            describe_url("postgresql://fleet@/jobs?host=/run/postgresql").unwrap(),
            "postgresql jobs on /run/postgresql:5432 as fleet"
        );
        assert_eq!(
            describe_url("postgres://u:p@h:6543/d").unwrap(),
            "postgresql d on h:6543 as u"
        );
    }

    /// A URL the driver cannot read says which part is wrong (the driver's own error says only
    /// "invalid connection string"), and never repeats the URL or its password.
    #[test]
    fn a_bad_url_names_the_part_that_is_wrong() {
        for (url, part) in [
            (
                "postgresql://u:secret@h:99999/d",
                "invalid value for option `port`",
            ),
            (
                "postgresql://u:secret@h:abc/d",
                "invalid value for option `port`",
            ),
            (
                "postgresql://u:secret@h/d?bogus=1",
                "unknown option `bogus`",
            ),
            (
                "postgresql://u:secret@h/d?connect_timeout=soon",
                "`connect_timeout`",
            ),
            ("postgresql://u:secret@h/d?sslmode=maybe", "`sslmode`"),
            ("postgresql://u:secret@h:0/d", "port 0"),
            (
                "postgres://u:secret%zz@h/db",
                "the password holds a malformed percent-escape",
            ),
            ("postgres://u:secret%4@h/db", "malformed percent-escape"),
            ("postgres://u:secret%00@h/db", "%00"),
            ("postgres://u%g1:secret@h/db", "the user holds"),
            ("postgres://u:secret@h/d%zz", "the database name holds"),
            (
                "postgres://u@h/db?password=secret%zz",
                "the value of `password` holds",
            ),
            (
                "postgres://u:secret@h/db?connect_timeout=-5",
                "`connect_timeout` must be a whole number of seconds",
            ),
            (
                "postgres://u:secret@h/db?connect_timeout=0",
                "`connect_timeout` must be a whole number of seconds",
            ),
            (
                "postgres://u:secret@h/db?connect_timeout=%2D5",
                "`connect_timeout` must be a whole number of seconds",
            ),
            (
                "postgres://u:secret@h/db?connect%5Ftimeout=+5",
                "`connect_timeout` must be a whole number of seconds",
            ),
            (
                "postgres://u:secret@h/db?connect_timeout=",
                "`connect_timeout` must be a whole number of seconds",
            ),
            // A bare `@` in the password: its rest would be shown as the host.
            ("postgres://u:Zq9@secret@h:5432/db", "must be written %40"),
            (
                "postgres://u:secret@h:5432/db?port=1",
                "1 host(s) and 2 ports",
            ),
        ] {
            let e = describe_url(url).unwrap_err();
            assert!(e.contains(part), "{url}: {e}");
            assert!(!e.contains("secret"), "{url}: {e}");
        }
    }

    /// What the checks must not refuse: well-formed escapes (a `%` written as `%25`, an `@` as
    /// `%40`), a positive timeout, a TLS mode spelled inside a password, and libpq's TLS modes.
    #[test]
    fn good_escapes_and_timeouts_pass() {
        for url in [
            "postgres://u:p%25q%40r@h/db?connect_timeout=5",
            "postgres://u:p@h/db?connect_timeout=010&application_name=a%20b",
            "postgresql://fleet@/jobs?host=%2Frun%2Fpostgresql",
            "postgresql://u:x?sslmode=allow&@h/db",
            "postgresql://u@h/db?sslmode=require",
            "postgresql://u@h/db?sslmode=disable&connect_timeout=3",
        ] {
            assert!(describe_url(url).is_ok(), "{url}: {:?}", describe_url(url));
        }
    }
}
