//! Explains what the sandbox refused, from a failed command's output and the policy: which
//! path it could not read or write, or that the network is off. The kernel reports a denial
//! as an ordinary permission error, so the explanation checks each path a permission error
//! names against the policy, for what the message says was tried (a read is named a read),
//! and against the user's own rights: only what the policy forbids and the user could
//! otherwise do is blamed on the sandbox (and only that offers a run outside it).

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
    /// Whether a run let out of the walls ([`SandboxPolicy::lifted`]) could do it: not for a
    /// hidden place, which stays hidden however a command is run.
    pub liftable: bool,
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

pub(crate) fn writable_list(policy: &SandboxPolicy) -> String {
    policy
        .writable
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a failed operation was, as far as a program's message tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Read,
    Write,
    /// The message does not say.
    Unknown,
}

/// Words with which programs report a failed read or a failed write (lower case).
const READ_WORDS: &[&str] = &[
    "for reading",
    "cannot read",
    "can't read",
    "could not read",
    "unable to read",
    "failed to read",
    "error reading",
    "cannot open directory",
    "cannot access",
];
const READING_PROGRAMS: &[&str] = &[
    "cat",
    "head",
    "tail",
    "less",
    "more",
    "grep",
    "rg",
    "wc",
    "xxd",
    "od",
    "strings",
    "source",
    "diff",
    "cmp",
    "md5sum",
    "sha256sum",
    "base64",
    "ls",
    "find",
    "du",
    "stat",
    "file",
];
const WRITE_WORDS: &[&str] = &[
    "read-only file system",
    "for writing",
    "cannot touch",
    "cannot create",
    "cannot remove",
    "cannot move",
    "cannot overwrite",
    "cannot make",
    "cannot write",
    "can't create",
    "could not create",
    "unable to create",
    "failed to create",
    "failed to write",
    "could not write",
    "unable to write",
    "cannot change",
    "changing permissions",
    "changing ownership",
    "setting times",
    "cannot set",
    "erofs",
];

fn verb_of(line: &str) -> Verb {
    let lower = line.to_lowercase();
    if WRITE_WORDS.iter().any(|w| lower.contains(w)) {
        return Verb::Write;
    }
    let program = lower
        .split(':')
        .next()
        .map(|first| {
            first
                .trim()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .unwrap_or_default();
    if READ_WORDS.iter().any(|w| lower.contains(w)) || READING_PROGRAMS.contains(&program.as_str())
    {
        return Verb::Read;
    }
    Verb::Unknown
}

/// Whether this user's own rights allow the access (so only the sandbox can have refused
/// it): reading the path, or writing it (its folder when it does not exist).
pub(crate) fn rights_allow(path: &Path, verb: Verb) -> bool {
    #[cfg(unix)]
    {
        use nix::unistd::{AccessFlags, access};
        match verb {
            Verb::Read => access(path, AccessFlags::R_OK).is_ok(),
            Verb::Write | Verb::Unknown => {
                if path.symlink_metadata().is_ok() {
                    access(path, AccessFlags::W_OK).is_ok()
                } else {
                    path.parent().is_some_and(|parent| {
                        access(parent, AccessFlags::W_OK | AccessFlags::X_OK).is_ok()
                    })
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (path, verb);
        true
    }
}

/// `/proc/<pid>/…` of another process: what the sandbox keeps commands from looking into.
fn other_process(path: &Path) -> bool {
    let mut parts = path.components().skip(1);
    parts.next().is_some_and(|c| c.as_os_str() == "proc")
        && parts.next().is_some_and(|c| {
            let name = c.as_os_str().to_string_lossy();
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())
        })
}

/// What the sandbox refused about `path`, when its policy refuses the access `verb` names
/// and the user's own rights allow it.
fn judge(policy: &SandboxPolicy, path: &Path, verb: Verb) -> Option<Denial> {
    match (strictest(policy, path), verb) {
        (PathAccess::Hidden, Verb::Write) if rights_allow(path, Verb::Write) => {
            Some(hidden(path, "writing"))
        }
        (PathAccess::Hidden, Verb::Read | Verb::Unknown) if rights_allow(path, Verb::Read) => {
            Some(hidden(path, "reading"))
        }
        (PathAccess::ReadOnly | PathAccess::Writable, Verb::Read | Verb::Unknown)
            if other_process(path) =>
        {
            Some(Denial {
                what: format!(
                    "reading {}: commands cannot look into other processes",
                    path.display()
                ),
                liftable: true,
            })
        }
        (PathAccess::ReadOnly, Verb::Write | Verb::Unknown) if rights_allow(path, Verb::Write) => {
            Some(Denial {
                what: format!(
                    "writing {} (commands may write only in {})",
                    path.display(),
                    writable_list(policy)
                ),
                liftable: true,
            })
        }
        _ => None,
    }
}

/// Explains what the sandbox refused, if the output shows it refused anything. `cwd` is where
/// the command ran; `named` are the paths the command names (for a refusal whose message
/// names no path).
///
/// A line blames the sandbox only when the path it names is one the policy refuses for what
/// the line says was tried (reading or writing) and the user's own rights allow that: a
/// message about a path the sandbox lets through, or one the user could not use anyway, is
/// the command's own failure, whoever printed it.
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
            liftable: true,
        });
    }
    let denied_lines: Vec<&str> = output
        .lines()
        .filter(|line| {
            let line = line.to_lowercase();
            DENIED.iter().any(|phrase| line.contains(phrase))
        })
        .collect();
    let mut named_any = false;
    let mut from_a_program = false;
    for line in &denied_lines {
        from_a_program |= line.split_once(": ").is_some_and(|(program, _)| {
            !program.is_empty() && !program.contains(char::is_whitespace)
        });
        let verb = verb_of(line);
        for path in named_paths(line) {
            named_any = true;
            if let Some(denial) = judge(policy, &resolve(cwd, &path), verb) {
                return Some(denial);
            }
        }
    }
    if !from_a_program || named_any {
        return None;
    }
    // A program's message that names no path: a hidden path the command names is the likely
    // cause.
    named
        .iter()
        .find(|path| {
            strictest(policy, path) == PathAccess::Hidden && rights_allow(path, Verb::Read)
        })
        .map(|path| hidden(path, "reading"))
}

fn hidden(path: &Path, verb: &str) -> Denial {
    Denial {
        what: format!(
            "{verb} {}: it is hidden from commands (credentials, keys or Talaria's own \
             settings)",
            path.display()
        ),
        liftable: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace, a private tmp, a hidden home folder and an outside folder, all real (the
    /// explanation checks the user's own rights on them).
    struct Layout {
        _dir: tempfile::TempDir,
        root: PathBuf,
    }

    impl Layout {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            let root = dir.path().canonicalize().expect("canonical");
            for folder in ["work/p", "tmp/talaria-x", "home/u/.ssh", "srv", "opt"] {
                std::fs::create_dir_all(root.join(folder)).expect("mkdir");
            }
            std::fs::write(root.join("home/u/.ssh/id_ed25519"), "k").expect("key");
            std::fs::write(root.join("srv/motd"), "m").expect("motd");
            Self { _dir: dir, root }
        }

        fn at(&self, path: &str) -> String {
            self.root.join(path).display().to_string()
        }

        fn policy(&self, network: bool) -> SandboxPolicy {
            SandboxPolicy {
                writable: vec![self.root.join("work/p"), self.root.join("tmp/talaria-x")],
                hidden: vec![self.root.join("home/u/.ssh")],
                readable: vec![],
                network,
                ..SandboxPolicy::default()
            }
        }

        fn what(&self, output: &str, named: &[&str]) -> Option<String> {
            let named: Vec<PathBuf> = named.iter().map(|p| self.root.join(p)).collect();
            explain(
                &self.policy(false),
                output,
                &self.root.join("work/p"),
                &named,
            )
            .map(|d| d.what)
        }
    }

    #[test]
    fn refused_writes_name_the_path_and_the_writable_places() {
        let l = Layout::new();
        for (output, path) in [
            (
                format!("touch: cannot touch '{}': Permission denied", l.at("srv/x")),
                l.at("srv/x"),
            ),
            (
                format!(
                    "mkdir: cannot create directory ‘{}’: Permission denied",
                    l.at("opt/new")
                ),
                l.at("opt/new"),
            ),
            (
                format!("bash: {}: Permission denied", l.at("srv/motd")),
                l.at("srv/motd"),
            ),
            (
                format!(
                    "PermissionError: [Errno 13] Permission denied: '{}'",
                    l.at("srv/out.txt")
                ),
                l.at("srv/out.txt"),
            ),
            (
                format!(
                    "touch: cannot touch '{}': Read-only file system",
                    l.at("srv/motd")
                ),
                l.at("srv/motd"),
            ),
            (
                "rm: cannot remove '../../srv/motd': Permission denied".to_string(),
                l.at("srv/motd"),
            ),
        ] {
            let said = l.what(&output, &[]).unwrap_or_default();
            assert!(
                said.starts_with(&format!("writing {path} ")),
                "{output}: {said}"
            );
            assert!(said.contains(&l.at("work/p")), "{said}");
        }
    }

    #[test]
    fn hidden_paths_are_named_as_hidden_and_reads_as_reads() {
        let l = Layout::new();
        let key = l.at("home/u/.ssh/id_ed25519");
        let said = l
            .what(&format!("cat: {key}: Permission denied"), &[])
            .unwrap_or_default();
        assert!(
            said.starts_with(&format!("reading {key}")) && said.contains("hidden"),
            "{said}"
        );
        let said = l
            .what(
                &format!("cp: cannot create regular file '{key}': Permission denied"),
                &[],
            )
            .unwrap_or_default();
        assert!(said.starts_with(&format!("writing {key}")), "{said}");
        let said = l
            .what(
                "grep: warning: recursive search: Permission denied",
                &["home/u/.ssh/id_ed25519"],
            )
            .unwrap_or_default();
        assert!(
            said.contains("id_ed25519") && said.contains("hidden"),
            "{said}"
        );
    }

    #[test]
    fn a_refused_look_into_another_process_is_a_read() {
        let l = Layout::new();
        let said = l
            .what("cat: /proc/1/environ: Permission denied", &[])
            .unwrap_or_default();
        assert_eq!(
            said,
            "reading /proc/1/environ: commands cannot look into other processes"
        );
    }

    #[test]
    fn network_failures_say_the_network_is_off() {
        let l = Layout::new();
        let said = l
            .what("curl: (6) Could not resolve host: example.com", &[])
            .unwrap_or_default();
        assert!(said.contains("network is off"), "{said}");
        let online = explain(
            &l.policy(true),
            "curl: (6) Could not resolve host: example.com",
            Path::new("/"),
            &[],
        );
        assert_eq!(online, None);
    }

    #[test]
    fn other_failures_are_not_blamed_on_the_sandbox() {
        let l = Layout::new();
        for output in [
            "error: test failed, exit 101".to_string(),
            "Permission denied".to_string(),
            // Inside the workspace the sandbox refuses nothing.
            format!(
                "touch: cannot touch '{}': Permission denied",
                l.at("work/p/ro/x")
            ),
            // A read of a readable file was refused by something else.
            format!("cat: {}: Permission denied", l.at("srv/motd")),
            format!(
                "head: cannot open '{}' for reading: Permission denied",
                l.at("srv/motd")
            ),
            // A folder that does not exist: nobody could have written there.
            format!(
                "touch: cannot touch '{}': Permission denied",
                l.at("nowhere/x")
            ),
            // A message that names a path the sandbox allows says nothing of named paths.
            format!("cat: {}: Permission denied", l.at("work/p/a.txt")),
        ] {
            assert_eq!(
                l.what(&output, &["home/u/.ssh/id_ed25519"]),
                None,
                "{output}"
            );
        }
    }
}
