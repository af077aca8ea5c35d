//! Where `--attach URL` goes: the web client's link (`http://HOST:PORT/#token=TOKEN&session=ID`,
//! also `https://`, `ws://`, `wss://`) made into the server's WebSocket address (`/acp` beside
//! the page), its token (from the link, else `--token`, else `$TALARIA_HOME/serve.token`) and
//! the session (from the link, else `--session`).

use std::path::PathBuf;

use anyhow::{Context, bail};

/// A session to attach to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `ws://HOST:PORT/acp` or `wss://…`.
    pub socket: String,
    /// The link's or `--token`'s; `None`: the token file's ([`token_file`]).
    pub token: Option<String>,
    pub session: String,
}

/// What the command line gave besides the link.
#[derive(Debug, Default)]
pub struct Given<'a> {
    pub token: Option<&'a str>,
    pub session: Option<&'a str>,
}

/// The target named by `link` (and `given`).
pub fn target(link: &str, given: Given<'_>) -> anyhow::Result<Target> {
    let mut url = url::Url::parse(link).with_context(|| format!("{link} is not an address"))?;
    let scheme = match url.scheme() {
        "http" | "ws" => "ws",
        "https" | "wss" => "wss",
        other => bail!("{link}: a talaria serve is reached over http(s) or ws(s), not {other}"),
    };
    let fragment: Vec<(String, String)> =
        url::form_urlencoded::parse(url.fragment().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let named = |key: &str| {
        fragment
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    let session = named("session")
        .or_else(|| given.session.map(str::to_string))
        .context(
            "no session to attach to: give the web client's link (…#session=ID) or --session ID",
        )?;
    let token = named("token").or_else(|| given.token.map(str::to_string));
    url.set_fragment(None);
    url.set_query(None);
    if url.set_scheme(scheme).is_err() {
        bail!("{link}: cannot be reached over {scheme}");
    }
    if !url.path().ends_with("/acp") {
        // The page's folder: `/` (or `/index.html`) → `/acp`, `/talaria/` → `/talaria/acp`.
        let folder = url
            .path()
            .rsplit_once('/')
            .map(|(folder, _)| folder.to_string());
        url.set_path(&format!("{}/acp", folder.unwrap_or_default()));
    }
    Ok(Target {
        socket: url.to_string(),
        token,
        session,
    })
}

/// The token of a `talaria serve` on this machine: `$TALARIA_HOME/serve.token` (by default
/// `~/.talaria/serve.token`).
pub async fn token_file() -> anyhow::Result<String> {
    let home = match std::env::var_os("TALARIA_HOME") {
        Some(home) => PathBuf::from(home),
        None => {
            PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".talaria")
        }
    };
    let path = home.join("serve.token");
    let token = tokio::fs::read_to_string(&path).await.with_context(|| {
        format!(
            "no token: the link has none (…#token=TOKEN), --token gives none, and {} cannot be \
             read",
            path.display()
        )
    })?;
    Ok(token.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_web_clients_link_names_the_socket_the_token_and_the_session() {
        let link = "http://127.0.0.1:8765/#token=abc&session=s-1";
        let got = target(link, Given::default()).expect("a target");
        assert_eq!(
            got,
            Target {
                socket: "ws://127.0.0.1:8765/acp".into(),
                token: Some("abc".into()),
                session: "s-1".into(),
            }
        );
        let got = target("https://host/talaria/#session=s-2", Given::default()).expect("a target");
        assert_eq!(got.socket, "wss://host/talaria/acp");
        assert_eq!(got.token, None, "the token file's");
        let got = target("http://host:1/index.html#session=s", Given::default()).expect("a target");
        assert_eq!(got.socket, "ws://host:1/acp");
    }

    #[test]
    fn a_socket_address_takes_the_token_and_session_from_the_command_line() {
        let given = Given {
            token: Some("t"),
            session: Some("s"),
        };
        let got = target("ws://127.0.0.1:9/acp", given).expect("a target");
        assert_eq!(got.socket, "ws://127.0.0.1:9/acp");
        assert_eq!(
            (got.token.as_deref(), got.session.as_str()),
            (Some("t"), "s")
        );
        // The link's token and session come before the command line's.
        let given = Given {
            token: Some("t"),
            session: Some("s"),
        };
        let got = target("http://h:1/#token=mine&session=ours", given).expect("a target");
        assert_eq!(
            (got.token.as_deref(), got.session.as_str()),
            (Some("mine"), "ours")
        );
    }

    #[test]
    fn what_cannot_be_attached_to_says_why() {
        let no_session = target("http://h:1/#token=t", Given::default());
        assert!(format!("{:#}", no_session.expect_err("no session")).contains("--session"));
        let ftp = target("ftp://h/#token=t&session=s", Given::default());
        assert!(format!("{:#}", ftp.expect_err("ftp")).contains("not ftp"));
    }
}
