//! What every request of `talaria serve` must pass before anything else: a `Host` naming the
//! address it listens on (no DNS rebinding), an `Origin`, when a browser sends one, that is
//! the server's own or allowed with `--allow-origin` (never a wildcard), and the bearer
//! token (`Authorization: Bearer`, or for a browser's WebSocket the subprotocol
//! `bearer.<token>`).

use std::net::SocketAddr;

use hyper::StatusCode;
use hyper::header::{AUTHORIZATION, HOST, HeaderMap, ORIGIN, SEC_WEBSOCKET_PROTOCOL};

use super::token::Token;

/// The subprotocol prefix a browser's WebSocket carries the token in.
pub const BEARER_SUBPROTOCOL: &str = "bearer.";

/// A refused request: its status and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub why: std::borrow::Cow<'static, str>,
}

fn refuse(status: StatusCode, why: &'static str) -> Refusal {
    Refusal {
        status,
        why: why.into(),
    }
}

/// Who may reach the server.
pub struct Guard {
    /// `host:port` values a request's `Host` may carry.
    hosts: Vec<String>,
    /// Listening on every address (`0.0.0.0`, `::`): any IP literal with the port is a name
    /// of this server (rebinding needs a DNS name, and names must be listed).
    any_address: bool,
    port: u16,
    /// Origins allowed: the server's own and `--allow-origin`'s.
    origins: Vec<String>,
    pub token: Token,
    /// Where the token is read from, for a 401's advice.
    token_path: Option<String>,
}

impl Guard {
    /// For a server listening on `listen` (`tls`: over HTTPS), allowing `extra` origins and
    /// the host names `names` (with the listen port; `--allow-host`).
    pub fn new(
        listen: SocketAddr,
        tls: bool,
        (extra, names): (&[String], &[String]),
        token: Token,
    ) -> Self {
        let port = listen.port();
        let mut hosts = vec![match listen {
            SocketAddr::V4(v4) => format!("{}:{port}", v4.ip()),
            SocketAddr::V6(v6) => format!("[{}]:{port}", v6.ip()),
        }];
        if listen.ip().is_loopback() {
            hosts.push(format!("localhost:{port}"));
        }
        hosts.extend(
            names
                .iter()
                .map(|name| format!("{}:{port}", name.to_ascii_lowercase())),
        );
        let scheme = if tls { "https" } else { "http" };
        let mut origins: Vec<String> = hosts.iter().map(|h| format!("{scheme}://{h}")).collect();
        origins.extend(extra.iter().map(|o| o.trim_end_matches('/').to_string()));
        Self {
            hosts,
            any_address: listen.ip().is_unspecified(),
            port,
            origins,
            token,
            token_path: None,
        }
    }

    /// A 401 names `path` as where the current token is.
    pub fn telling_where(mut self, path: &std::path::Path) -> Self {
        self.token_path = Some(path.display().to_string());
        self
    }

    fn unauthorized(&self, what: &'static str, advice: &str) -> Refusal {
        let why = match &self.token_path {
            Some(path) => format!("{what}: {advice} {path}").into(),
            None => what.into(),
        };
        Refusal {
            status: StatusCode::UNAUTHORIZED,
            why,
        }
    }

    /// The `Host` names this server (its address, or `localhost` on loopback).
    pub fn check_host(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(host) = headers.get(HOST).and_then(|v| v.to_str().ok()) else {
            return Err(refuse(StatusCode::BAD_REQUEST, "the request names no Host"));
        };
        let host = host.to_ascii_lowercase();
        if self.hosts.contains(&host) || self.is_ip_literal_of_any_address(&host) {
            Ok(())
        } else {
            Err(refuse(
                StatusCode::FORBIDDEN,
                "the Host is not this server's address (DNS rebinding is refused)",
            ))
        }
    }

    fn is_ip_literal_of_any_address(&self, host: &str) -> bool {
        self.any_address
            && host
                .parse::<SocketAddr>()
                .is_ok_and(|addr| addr.port() == self.port)
    }

    /// The request's `Origin`, when it has one and it is allowed (`Ok(None)`: no Origin, a
    /// client that is not a browser).
    pub fn check_origin<'a>(&self, headers: &'a HeaderMap) -> Result<Option<&'a str>, Refusal> {
        let Some(origin) = headers.get(ORIGIN) else {
            return Ok(None);
        };
        let origin = origin.to_str().unwrap_or("null");
        if self
            .origins
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(origin))
        {
            Ok(Some(origin))
        } else {
            Err(refuse(
                StatusCode::FORBIDDEN,
                "this Origin may not use the server (allow it with --allow-origin)",
            ))
        }
    }

    /// The bearer token, from `Authorization` or (`websocket`) a `bearer.` subprotocol.
    pub fn check_token(&self, headers: &HeaderMap, websocket: bool) -> Result<(), Refusal> {
        let from_header = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        let from_subprotocol = websocket
            .then(|| offered_subprotocols(headers))
            .into_iter()
            .flatten()
            .find_map(|p| p.strip_prefix(BEARER_SUBPROTOCOL).map(str::to_string));
        let offered = from_header.map(str::to_string).or(from_subprotocol);
        match offered {
            None => Err(self.unauthorized(
                "no token was given",
                "send `Authorization: Bearer TOKEN` (a browser's WebSocket: the subprotocol \
                 `bearer.TOKEN`) with the token in",
            )),
            Some(token) if self.token.accepts(&token) => Ok(()),
            Some(_) => Err(self.unauthorized(
                "the token is not this server's",
                "the server may have started again and written a new one; read the current \
                 token from",
            )),
        }
    }
}

/// The subprotocols a WebSocket upgrade offers.
pub fn offered_subprotocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn guard() -> Guard {
        let dir = tempfile::tempdir().expect("dir");
        let token = Token::generate_into(&dir.path().join("t")).expect("token");
        Guard::new(
            "127.0.0.1:8765".parse().expect("addr"),
            false,
            (&["https://app.example".into()], &["agent.example".into()]),
            token,
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).expect("value"));
        }
        map
    }

    #[test]
    fn only_this_servers_host_names_pass() {
        let g = guard();
        assert!(
            g.check_host(&headers(&[("host", "127.0.0.1:8765")]))
                .is_ok()
        );
        assert!(
            g.check_host(&headers(&[("host", "LOCALHOST:8765")]))
                .is_ok()
        );
        for host in [
            "evil.example:8765",
            "127.0.0.1:8766",
            "localhost",
            "127.0.0.1",
            "attacker.test",
        ] {
            let refused = g.check_host(&headers(&[("host", host)])).expect_err(host);
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{host}");
        }
        assert_eq!(
            g.check_host(&HeaderMap::new()).expect_err("no host").status,
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn listed_names_pass_and_on_every_address_ip_literals_pass_but_names_do_not() {
        let g = guard();
        assert!(
            g.check_host(&headers(&[("host", "Agent.Example:8765")]))
                .is_ok()
        );
        assert!(
            g.check_host(&headers(&[("host", "agent.example:80")]))
                .is_err()
        );
        assert!(
            g.check_host(&headers(&[("host", "10.0.0.5:8765")]))
                .is_err(),
            "on loopback, another IP is not this server"
        );
        let dir = tempfile::tempdir().expect("dir");
        let token = Token::generate_into(&dir.path().join("t")).expect("token");
        let everywhere = Guard::new(
            "0.0.0.0:9000".parse().expect("addr"),
            true,
            (&[], &[]),
            token,
        );
        for host in ["10.0.0.5:9000", "192.168.1.20:9000", "[fe80::1]:9000"] {
            assert!(
                everywhere.check_host(&headers(&[("host", host)])).is_ok(),
                "{host}"
            );
        }
        for host in [
            "10.0.0.5:9001",
            "rebound.attacker.test:9000",
            "localhost:9000",
            "10.0.0.5",
        ] {
            assert!(
                everywhere.check_host(&headers(&[("host", host)])).is_err(),
                "{host}"
            );
        }
    }

    #[test]
    fn origins_are_the_servers_own_or_allowed_ones_never_any() {
        let g = guard();
        assert_eq!(g.check_origin(&HeaderMap::new()), Ok(None));
        assert!(
            g.check_origin(&headers(&[("origin", "http://127.0.0.1:8765")]))
                .is_ok()
        );
        assert!(
            g.check_origin(&headers(&[("origin", "http://localhost:8765")]))
                .is_ok()
        );
        assert!(
            g.check_origin(&headers(&[("origin", "https://app.example")]))
                .is_ok()
        );
        for origin in [
            "null",
            "https://evil.example",
            "http://127.0.0.1:9999",
            "https://app.example.evil",
            "*",
        ] {
            assert!(
                g.check_origin(&headers(&[("origin", origin)])).is_err(),
                "{origin}"
            );
        }
    }

    #[test]
    fn the_token_comes_in_the_header_or_a_websocket_subprotocol() {
        let g = guard();
        let good = g.token.text().to_string();
        assert!(
            g.check_token(
                &headers(&[("authorization", &format!("Bearer {good}"))]),
                false
            )
            .is_ok()
        );
        let offered = format!("acp, bearer.{good}");
        assert!(
            g.check_token(&headers(&[("sec-websocket-protocol", &offered)]), true)
                .is_ok()
        );
        assert!(
            g.check_token(&headers(&[("sec-websocket-protocol", &offered)]), false)
                .is_err()
        );
        assert_eq!(
            g.check_token(&HeaderMap::new(), false)
                .expect_err("none")
                .why,
            "no token was given"
        );
        for wrong in [
            "Bearer nope",
            "Bearer ",
            "Basic abc",
            &format!("Bearer {good}x"),
        ] {
            assert!(
                g.check_token(&headers(&[("authorization", wrong)]), false)
                    .is_err(),
                "{wrong}"
            );
        }
    }
}
