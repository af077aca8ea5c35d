//! Explains what the sandbox refused, from a failed command's output and the policy: which
//! path it could not read or write, or that the network is off. The kernel reports a denial
//! as an ordinary permission error, so the explanation checks each path a permission error
//! names against the policy; only what the policy forbids is blamed on the sandbox.

use std::path::{Path, PathBuf};

use crate::policy::{PathAccess, SandboxPolicy};

/// Phrases with which programs report a refused file operation (compared in lower case).
const DENIED: &[&str] = &[
    "permission denied",
    "operation not permitted",
    "read-only file system",
    "eacces",
    "eperm",
    "access is denied",
];

/// Phrases with which programs report that they could not reach the network.
const OFFLINE: &[&str] = &[
    "could not resolve host",
    "temporary failure in name resolution",
    "name or service not known",
    "network is unreachable",
    "failed to establish a new connection",
    "getaddrinfo",
    "enotfound",
    "eai_again",
    "couldn't connect",
    "could not connect",
    "socket: permission denied",
    "unable to resolve host",
    "no address associated with hostname",
];

/// What the sandbox refused, in words for the model and the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// E.g. "writing /srv/x (commands may write only in /work/p, /tmp/talaria-1)".
    pub what: String,
}

/// The paths named in one line of output, likeliest first: quoted words, then what stands
/// right before the denial (`bash: /x/y: Permission denied`), then any word that looks like
/// a path (a program's own path at the start of the line comes last).
fn named_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lower = line.to_lowercase();
    if let Some(at) = DENIED.iter().filter_map(|phrase| lower.find(phrase)).min()
        && let Some(before) = line.get(..at)
        && let Some(last) = before.trim_end().trim_end_matches(':').rsplit(": ").next()
    {
        let candidate = last.trim().trim_matches(|c: char| "'\"‘’`".contains(c));
        if candidate.starts_with('/') || candidate.starts_with('.') {
            out.push(candidate.to_string());
        }
    }
    let mut quoted = Vec::new();
    for (open, close) in [('\'', '\''), ('‘', '’'), ('"', '"'), ('`', '\'')] {
        let mut rest = line;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len_utf8()..];
            let Some(end) = after.find(close) else { break };
            quoted.push(after[..end].to_string());
            rest = &after[end + close.len_utf8()..];
        }
    }
    quoted.append(&mut out);
    out = quoted;
    for word in line.split([' ', ':', ',', '(', ')', '[', ']']) {
        let word = word.trim_matches(|c: char| "'\"‘’`".contains(c));
        if word.starts_with('/') || word.starts_with("./") || word.starts_with("../") {
            out.push(word.to_string());
        }
    }
    out.retain(|p| p.starts_with('/') || (!p.is_empty() && !p.contains(char::is_whitespace)));
    out
}

fn resolve(cwd: &Path, path: &str) -> PathBuf {
    let joined = cwd.join(path);
    let mut out = PathBuf::new();
    for component in joined.components() {
        match component {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The strictest access the policy grants `path`, as written and as resolved (a link is
/// judged by where it points).
fn strictest(policy: &SandboxPolicy, path: &Path) -> PathAccess {
    let mut access = policy.access(path);
    let real = path
        .canonicalize()
        .or_else(|_| {
            path.parent()
                .map_or(Err(std::io::ErrorKind::NotFound.into()), Path::canonicalize)
                .map(|parent| parent.join(path.file_name().unwrap_or_default()))
        })
        .ok();
    if let Some(real) = real {
        access = match (access, policy.access(&real)) {
            (PathAccess::Hidden, _) | (_, PathAccess::Hidden) => PathAccess::Hidden,
            (PathAccess::ReadOnly, _) | (_, PathAccess::ReadOnly) => PathAccess::ReadOnly,
            _ => PathAccess::Writable,
        };
    }
    access
}

fn writable_list(policy: &SandboxPolicy) -> String {
    policy
        .writable
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Explains what the sandbox refused, if the output shows it refused anything. `cwd` is where
/// the command ran; `named` are the paths the command names (for a refusal whose message
/// names no path).
pub fn explain(
    policy: &SandboxPolicy,
    output: &str,
    cwd: &Path,
    named: &[PathBuf],
) -> Option<Denial> {
    let lower = output.to_lowercase();
    if !policy.network && OFFLINE.iter().any(|phrase| lower.contains(phrase)) {
        return Some(Denial {
            what: "opening a network connection: the network is off for commands \
                   ([sandbox] network = false)"
                .into(),
        });
    }
    let denied_lines: Vec<&str> = output
        .lines()
        .filter(|line| {
            let line = line.to_lowercase();
            DENIED.iter().any(|phrase| line.contains(phrase))
        })
        .collect();
    if denied_lines.is_empty() {
        return None;
    }
    let reported = denied_lines
        .iter()
        .flat_map(|line| named_paths(line))
        .map(|p| resolve(cwd, &p));
    for path in reported {
        match strictest(policy, &path) {
            PathAccess::Hidden => return Some(hidden(&path)),
            PathAccess::ReadOnly => {
                return Some(Denial {
                    what: format!(
                        "writing {} (commands may write only in {})",
                        path.display(),
                        writable_list(policy)
                    ),
                });
            }
            PathAccess::Writable => {}
        }
    }
    // A message that names no path: a hidden path the command names is the likely cause.
    named
        .iter()
        .find(|path| strictest(policy, path) == PathAccess::Hidden)
        .map(|path| hidden(path))
}

fn hidden(path: &Path) -> Denial {
    Denial {
        what: format!(
            "reading or writing {}: it is hidden from commands (credentials, keys or \
             Talaria's own settings)",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(network: bool) -> SandboxPolicy {
        SandboxPolicy {
            writable: vec!["/work/p".into(), "/tmp/talaria-x".into()],
            hidden: vec!["/home/u/.ssh".into(), "/home/u/.talaria".into()],
            readable: vec![],
            network,
        }
    }

    fn what(output: &str, cwd: &str, named: &[&str]) -> Option<String> {
        let named: Vec<PathBuf> = named.iter().map(PathBuf::from).collect();
        explain(&policy(false), output, Path::new(cwd), &named).map(|d| d.what)
    }

    #[test]
    fn refused_writes_name_the_path_and_the_writable_places() {
        for (output, path) in [
            ("touch: cannot touch '/srv/x': Permission denied", "/srv/x"),
            (
                "mkdir: cannot create directory ‘/opt/new’: Permission denied",
                "/opt/new",
            ),
            ("bash: /etc/motd: Permission denied", "/etc/motd"),
            (
                "PermissionError: [Errno 13] Permission denied: '/var/tmp/out.txt'",
                "/var/tmp/out.txt",
            ),
            (
                "Error: EACCES: permission denied, open '/home/u/notes.md'",
                "/home/u/notes.md",
            ),
            (
                "rm: cannot remove '../other/file': Permission denied",
                "/work/other/file",
            ),
        ] {
            let said = what(output, "/work/p", &[]).unwrap_or_default();
            assert!(
                said.starts_with(&format!("writing {path} ")),
                "{output}: {said}"
            );
            assert!(said.contains("/work/p, /tmp/talaria-x"), "{said}");
        }
    }

    #[test]
    fn hidden_paths_are_named_as_hidden() {
        let said = what(
            "cat: /home/u/.ssh/id_ed25519: Permission denied",
            "/work/p",
            &[],
        )
        .unwrap_or_default();
        assert!(
            said.contains("/home/u/.ssh/id_ed25519") && said.contains("hidden"),
            "{said}"
        );
        let said = what(
            "grep: warning: recursive search: Permission denied",
            "/work/p",
            &["/home/u/.talaria/config.toml"],
        )
        .unwrap_or_default();
        assert!(
            said.contains("config.toml") && said.contains("hidden"),
            "{said}"
        );
    }

    #[test]
    fn network_failures_say_the_network_is_off() {
        let said = what(
            "curl: (6) Could not resolve host: example.com",
            "/work/p",
            &[],
        )
        .unwrap_or_default();
        assert!(said.contains("network is off"), "{said}");
        let online = explain(
            &policy(true),
            "curl: (6) Could not resolve host: example.com",
            Path::new("/work/p"),
            &[],
        );
        assert_eq!(online, None);
    }

    #[test]
    fn other_failures_are_not_blamed_on_the_sandbox() {
        assert_eq!(what("error: test failed, exit 101", "/work/p", &[]), None);
        assert_eq!(
            what(
                "touch: cannot touch '/work/p/ro/x': Permission denied",
                "/work/p",
                &[]
            ),
            None
        );
    }
}
