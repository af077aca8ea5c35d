//! What `talaria doctor` says about a PostgreSQL store, read without changing anything: the
//! server reached, whether the connection is encrypted, the schema's version against this
//! build's, the sessions kept, and whether the user may do what the store does.

use super::options::PgOptions;
use super::{schema, tls};
use crate::StoreError;

/// A PostgreSQL store's state.
#[derive(Debug, Clone, PartialEq)]
pub struct PgReport {
    /// `database on host:port`.
    pub label: String,
    /// The server's version, as it says it.
    pub server_version: String,
    /// The connection is encrypted.
    pub encrypted: bool,
    /// The schema's version (0: not created yet); `known` is this build's.
    pub schema_version: i64,
    pub known: i64,
    /// Sessions kept (when the schema exists).
    pub sessions: i64,
    /// What the user may not do that the store needs, e.g. `INSERT on entries`.
    pub missing_privileges: Vec<String>,
}

/// Tables and the privileges the store uses on each.
const TABLES: &[(&str, &[&str])] = &[
    ("sessions", &["SELECT", "INSERT", "UPDATE", "DELETE"]),
    ("entries", &["SELECT", "INSERT", "UPDATE", "DELETE"]),
    ("claims", &["SELECT", "INSERT", "UPDATE", "DELETE"]),
    ("deleted_sessions", &["SELECT", "INSERT"]),
    ("session_asks", &["SELECT", "INSERT", "UPDATE", "DELETE"]),
    ("talaria_schema", &["SELECT"]),
];

/// Reads the report with one connection; nothing is created or migrated.
pub fn inspect(options: &PgOptions) -> Result<PgReport, StoreError> {
    let mut client = options
        .driver
        .connect(tls::connector(options)?)
        .map_err(|e| StoreError::Open {
            path: options.label.clone(),
            detail: super::describe(&e),
        })?;
    let server_version: String = client.query_one("SHOW server_version", &[])?.get(0);
    let encrypted: bool = client
        .query_opt(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )?
        .is_some_and(|row| row.get(0));
    let exists = |client: &mut postgres::Client, table: &str| -> Result<bool, StoreError> {
        Ok(client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])?
            .get(0))
    };
    let mut report = PgReport {
        label: options.label.clone(),
        server_version,
        encrypted,
        schema_version: 0,
        known: schema::VERSION,
        sessions: 0,
        missing_privileges: Vec::new(),
    };
    if !exists(&mut client, "talaria_schema")? {
        let may_create: bool = client
            .query_one("SELECT has_schema_privilege('public', 'CREATE')", &[])?
            .get(0);
        if !may_create {
            report
                .missing_privileges
                .push("CREATE on schema public (to create the store's tables)".into());
        }
        return Ok(report);
    }
    report.schema_version = client
        .query_opt("SELECT version FROM talaria_schema", &[])?
        .map_or(0, |row| row.get(0));
    for (table, privileges) in TABLES {
        if !exists(&mut client, table)? {
            continue;
        }
        for privilege in *privileges {
            let granted: bool = client
                .query_one("SELECT has_table_privilege($1, $2)", &[table, privilege])?
                .get(0);
            if !granted {
                report
                    .missing_privileges
                    .push(format!("{privilege} on {table}"));
            }
        }
    }
    if exists(&mut client, "sessions")?
        && !report
            .missing_privileges
            .iter()
            .any(|m| m == "SELECT on sessions")
    {
        report.sessions = client
            .query_one("SELECT count(*) FROM sessions", &[])?
            .get(0);
    }
    Ok(report)
}
