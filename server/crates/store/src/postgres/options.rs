//! What the PostgreSQL store's URL says beyond what the driver reads: TLS verification
//! (`sslmode` with libpq's names, `sslrootcert`) and where the password comes from (the URL,
//! `PGPASSWORD`, or a passfile in libpq's format). The password is never part of a message.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::StoreError;

/// How the connection is encrypted and the server checked (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Plain connections.
    Disable,
    /// TLS when the server offers it, without checking its certificate (libpq's default).
    Prefer,
    /// TLS always, without checking the certificate.
    Require,
    /// TLS with a certificate signed by a trusted root (any host name).
    VerifyCa,
    /// TLS with a trusted certificate for the host connected to.
    VerifyFull,
}

/// Where and how to connect, from a store URL.
#[derive(Clone)]
pub struct PgOptions {
    /// The driver's configuration (password included when known).
    pub(super) driver: postgres::Config,
    pub tls: TlsMode,
    /// PEM roots trusted instead of the bundled web roots (`sslrootcert`).
    pub root_certificate: Option<PathBuf>,
    /// Where the connection goes, without credentials: `database on host:port`.
    pub label: String,
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOptions")
            .field("database", &self.label)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

fn open_error(detail: impl Into<String>) -> StoreError {
    StoreError::Open {
        path: "the store URL".into(),
        detail: detail.into(),
    }
}

fn tls_mode(value: &str) -> Result<TlsMode, StoreError> {
    Ok(match value {
        "disable" => TlsMode::Disable,
        "allow" | "prefer" => TlsMode::Prefer,
        "require" => TlsMode::Require,
        "verify-ca" => TlsMode::VerifyCa,
        "verify-full" => TlsMode::VerifyFull,
        other => {
            return Err(open_error(format!(
                "sslmode {other:?} is not one of disable, prefer, require, verify-ca, verify-full"
            )));
        }
    })
}

/// Parameters of the URL's query that Talaria reads itself, and the URL without them.
struct Split {
    url: String,
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    passfile: Option<String>,
}

fn split_url(url: &str) -> Split {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut split = Split {
        url: base.to_string(),
        sslmode: None,
        sslrootcert: None,
        passfile: None,
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = percent_encoding::percent_decode_str(value)
            .decode_utf8_lossy()
            .into_owned();
        match key {
            "sslmode" => split.sslmode = Some(decoded),
            "sslrootcert" => split.sslrootcert = Some(decoded),
            "passfile" => split.passfile = Some(decoded),
            _ => kept.push(pair),
        }
    }
    if !kept.is_empty() {
        split.url = format!("{}?{}", split.url, kept.join("&"));
    }
    split
}

/// Where the passfile is: the URL's, else the configuration's, else `PGPASSFILE`, else
/// `~/.pgpass`.
fn passfile_path(
    from_url: Option<String>,
    configured: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<PathBuf> {
    from_url
        .map(PathBuf::from)
        .or_else(|| configured.map(Path::to_path_buf))
        .or_else(|| {
            env("PGPASSFILE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| {
            env("HOME")
                .filter(|h| !h.is_empty())
                .map(|home| Path::new(&home).join(".pgpass"))
        })
}

/// One passfile line's fields, with `\:` and `\\` unescaped.
fn passfile_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(field)) = (chars.next(), fields.last_mut()) {
                    field.push(next);
                }
            }
            ':' => fields.push(String::new()),
            other => {
                if let Some(field) = fields.last_mut() {
                    field.push(other);
                }
            }
        }
    }
    fields
}

/// The password a passfile (libpq's `host:port:database:user:password`, `*` matching
/// anything) gives for this connection.
pub(crate) fn password_from_passfile(text: &str, wanted: [&str; 4]) -> Option<String> {
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#') && !line.trim().is_empty())
        .map(passfile_fields)
        .find(|fields| {
            fields.len() == 5
                && fields
                    .iter()
                    .zip(wanted)
                    .all(|(field, want)| field == "*" || field == want)
        })
        .and_then(|mut fields| fields.pop())
}

fn host_of(config: &postgres::Config) -> String {
    match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(name)) => name.clone(),
        Some(postgres::config::Host::Unix(_)) | None => "localhost".into(),
    }
}

impl PgOptions {
    /// Reads a store URL (`postgres://user@host:port/database?sslmode=…`). The password is
    /// the URL's, else `PGPASSWORD`, else the passfile's (`passfile` in the URL, else
    /// `configured_passfile`, else `PGPASSFILE`, else `~/.pgpass`).
    pub fn parse(
        url: &str,
        configured_passfile: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, StoreError> {
        let split = split_url(url);
        let mut driver = postgres::Config::from_str(&split.url).map_err(|e| {
            open_error(format!(
                "it is not a PostgreSQL URL (postgres://user@host:port/database): {e}"
            ))
        })?;
        let tls = split
            .sslmode
            .as_deref()
            .map_or(Ok(TlsMode::Prefer), tls_mode)?;
        let root_certificate = split.sslrootcert.map(PathBuf::from);
        // libpq checks the chain when a root certificate is named with `require`.
        let tls = match (tls, &root_certificate) {
            (TlsMode::Require, Some(_)) => TlsMode::VerifyCa,
            (mode, _) => mode,
        };
        if driver.get_user().is_none()
            && let Some(user) = env("PGUSER").or_else(|| env("USER"))
        {
            driver.user(&user);
        }
        let host = host_of(&driver);
        let port = driver.get_ports().first().copied().unwrap_or(5432);
        let database = driver
            .get_dbname()
            .or(driver.get_user())
            .unwrap_or("postgres")
            .to_string();
        if driver.get_password().is_none() {
            let password = env("PGPASSWORD").filter(|p| !p.is_empty()).or_else(|| {
                let path = passfile_path(split.passfile, configured_passfile, env)?;
                let text = std::fs::read_to_string(path).ok()?;
                let user = driver.get_user().unwrap_or_default();
                password_from_passfile(&text, [&host, &port.to_string(), &database, user])
            });
            if let Some(password) = password {
                driver.password(password);
            }
        }
        if driver.get_connect_timeout().is_none() {
            driver.connect_timeout(std::time::Duration::from_secs(10));
        }
        driver.keepalives_idle(std::time::Duration::from_secs(15));
        driver.application_name("talaria");
        driver.ssl_mode(match tls {
            TlsMode::Disable => postgres::config::SslMode::Disable,
            TlsMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        });
        Ok(Self {
            driver,
            tls,
            root_certificate,
            label: format!("{database} on {host}:{port}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |key| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_string())
        }
    }

    #[test]
    fn passfile_lines_match_with_wildcards_and_escapes() {
        let text = "# comment\nother:5432:db:me:wrong\n*:5432:db:me:pa\\:ss\n";
        assert_eq!(
            password_from_passfile(text, ["db.example", "5432", "db", "me"]).as_deref(),
            Some("pa:ss")
        );
        assert_eq!(
            password_from_passfile(text, ["other", "5432", "db", "me"]).as_deref(),
            Some("wrong")
        );
        assert_eq!(
            password_from_passfile(text, ["h", "5433", "db", "me"]),
            None
        );
    }

    #[test]
    fn the_url_keeps_its_driver_options_and_loses_talarias() {
        let options = PgOptions::parse(
            "postgres://me@db.example:6543/team?sslmode=verify-full&sslrootcert=%2Fca.pem&connect_timeout=3",
            None,
            &env_of(&[("PGPASSWORD", "secret")]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(options.tls, TlsMode::VerifyFull);
        assert_eq!(options.root_certificate, Some(PathBuf::from("/ca.pem")));
        assert_eq!(options.label, "team on db.example:6543");
        assert_eq!(options.driver.get_password(), Some(&b"secret"[..]));
        assert_eq!(
            options.driver.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(3))
        );
        let shown = format!("{options:?}");
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn a_passfile_gives_the_password_and_require_with_a_root_checks_the_chain() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let passfile = dir.path().join("pass");
        std::fs::write(&passfile, "localhost:5432:team:me:from-file\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let options = PgOptions::parse(
            "postgresql://me@localhost/team?sslmode=require&sslrootcert=/ca.pem",
            Some(&passfile),
            &env_of(&[]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(options.driver.get_password(), Some(&b"from-file"[..]));
        assert_eq!(options.tls, TlsMode::VerifyCa);
        assert!(PgOptions::parse("postgres://h/db?sslmode=maybe", None, &env_of(&[])).is_err());
        assert!(PgOptions::parse("not a url at all ://", None, &env_of(&[])).is_err());
    }
}
