//! Floor targets: whether a path names the root, the home or a system directory, with
//! braces and globs expanded symbolically (a glob that can match a protected directory is
//! treated as matching it), and whether it can be evaluated at all; long options matched by
//! unambiguous prefix, as GNU programs accept them.

use super::ShellEnv;
use super::words::UNKNOWN;

/// The directory commands run in, as far as a `cd` tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cwd {
    /// The session's working directory (relative paths are the project's).
    Session,
    /// An absolute directory a static `cd` moved to.
    Known(String),
    /// A `cd` to somewhere only known at run time.
    Unknown,
}

/// Directories whose recursive deletion (or move, or ownership change) destroys the system.
pub(super) const SYSTEM_DIRS: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/usr",
    "/var",
    "/mnt",
    "/media",
    "/nix",
    "/snap",
    "/System",
    "/Library",
    "/Applications",
    "/Users",
    "/Volumes",
    "/private",
];

/// The most alternatives a brace expansion is followed to.
const MAX_ALTERNATIVES: usize = 64;

/// What a target is, as far as the floor is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Protection {
    /// It names (or may name) the root, the home or a system directory: this one.
    Protected(String),
    /// It names something else.
    Safe,
    /// It cannot be evaluated before the command runs.
    Unevaluable,
}

/// Folds `path` to an absolute, normalised form; `None` when it is relative to a directory
/// only known at run time (or to the session's own directory, which is the project).
pub(super) fn normalize(path: &str, cwd: &Cwd) -> Option<String> {
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        match cwd {
            Cwd::Known(dir) => format!("{dir}/{path}"),
            Cwd::Session | Cwd::Unknown => return None,
        }
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// `a{b,c}d` → `abd`, `acd` (nested braces too); a word without a comma-list in braces is
/// itself. At most [`MAX_ALTERNATIVES`] results.
pub(super) fn expand_braces(word: &str) -> Vec<String> {
    let bytes = word.as_bytes();
    let mut depth = 0usize;
    let mut open = None;
    for (index, &byte) in bytes.iter().enumerate() {
        match byte {
            b'{' => {
                if depth == 0 {
                    open = Some(index);
                }
                depth += 1;
            }
            b'}' if depth > 0 => {
                depth -= 1;
                if depth == 0
                    && let Some(start) = open
                {
                    let inner = &word[start + 1..index];
                    let parts = split_top_level(inner);
                    if parts.len() > 1 {
                        let (head, tail) = (&word[..start], &word[index + 1..]);
                        let mut out = Vec::new();
                        for part in parts {
                            for expanded in expand_braces(&format!("{head}{part}{tail}")) {
                                if out.len() < MAX_ALTERNATIVES {
                                    out.push(expanded);
                                }
                            }
                        }
                        return out;
                    }
                    open = None;
                }
            }
            _ => {}
        }
    }
    vec![word.to_string()]
}

/// Splits at commas outside nested braces.
fn split_top_level(inner: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&inner[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
}

fn has_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// A last component that matches every (or almost every) entry of its directory: `*`, `.*`,
/// `?*`, `[a-z]*`, `.[!.]*`; `build-*` names particular entries and is not one.
fn matches_everything(component: &str) -> bool {
    let mut rest = component.trim_start_matches('.');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            match after.find(']') {
                Some(end) => rest = &after[end + 1..],
                None => return false,
            }
        } else if let Some(after) = rest.strip_prefix(['*', '?']) {
            rest = after;
        } else {
            return false;
        }
    }
    component.contains(['*', '?', '['])
}

/// The protected directories, normalised.
fn protected_dirs(env: &ShellEnv) -> Vec<String> {
    let mut dirs: Vec<String> = std::iter::once("/".to_string())
        .chain(SYSTEM_DIRS.iter().map(|d| (*d).to_string()))
        .collect();
    if let Some(home) = env
        .home
        .as_deref()
        .and_then(|h| normalize(h, &Cwd::Session))
    {
        dirs.push(home);
    }
    dirs
}

/// Whether the glob `pattern` (absolute, normalised) can match `path`.
fn glob_matches(pattern: &str, path: &str) -> bool {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher().is_match(path))
        // A pattern too odd to compile is assumed to match: fail closed.
        .unwrap_or(true)
}

/// What one alternative (braces already expanded) of a target is.
fn protection_of_one(target: &str, cwd: &Cwd, env: &ShellEnv) -> Protection {
    let mut target = target.trim().to_string();
    // A last component that matches everything in its directory stands for the directory.
    loop {
        let (dir, last) = match target.rsplit_once('/') {
            Some((dir, last)) => (dir, last),
            None => ("", target.as_str()),
        };
        if !matches_everything(last) {
            break;
        }
        target = match (dir.is_empty(), target.contains('/')) {
            (true, true) => "/".into(),
            (true, false) => ".".into(),
            _ => dir.to_string(),
        };
    }
    let Some(path) = normalize(&target, cwd) else {
        return match cwd {
            Cwd::Unknown => Protection::Unevaluable,
            _ => Protection::Safe,
        };
    };
    let dirs = protected_dirs(env);
    let found = if has_glob(&path) {
        dirs.into_iter().find(|dir| glob_matches(&path, dir))
    } else {
        dirs.into_iter().find(|dir| *dir == path)
    };
    found.map_or(Protection::Safe, Protection::Protected)
}

/// Whether deleting (moving, re-owning) `target` recursively would destroy the system or the
/// user's home; `Unevaluable` when that is only known at run time.
pub(super) fn protection(target: &str, cwd: &Cwd, env: &ShellEnv) -> Protection {
    if target.trim().is_empty() {
        return Protection::Safe;
    }
    if target.contains(UNKNOWN) {
        return Protection::Unevaluable;
    }
    let mut result = Protection::Safe;
    for alternative in expand_braces(target) {
        match protection_of_one(&alternative, cwd, env) {
            Protection::Protected(dir) => return Protection::Protected(dir),
            Protection::Unevaluable => result = Protection::Unevaluable,
            Protection::Safe => {}
        }
    }
    result
}

/// The long option `word` stands for among `options` (`--recur` is `--recursive` when no
/// other option starts so; `--opt=value` is `--opt`).
pub(super) fn long_option<'a>(word: &str, options: &[&'a str]) -> Option<&'a str> {
    if !word.starts_with("--") || word == "--" {
        return None;
    }
    let name = word.split('=').next().unwrap_or(word);
    if let Some(exact) = options.iter().find(|o| **o == name) {
        return Some(exact);
    }
    let mut candidates = options.iter().filter(|o| o.starts_with(name));
    match (candidates.next(), candidates.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// Whether `args` (before `--`) hold the short option `short` or the long option `long`
/// (by unambiguous prefix among `longs`).
pub(super) fn has_option(args: &[&str], short: Option<char>, long: &str, longs: &[&str]) -> bool {
    args.iter().take_while(|t| **t != "--").any(|t| {
        long_option(t, longs) == Some(long)
            || short.is_some_and(|short| {
                t.starts_with('-') && !t.starts_with("--") && t[1..].contains(short)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> ShellEnv {
        ShellEnv {
            home: Some("/home/dev".into()),
            ..ShellEnv::default()
        }
    }

    #[test]
    fn braces_expand_every_alternative() {
        assert_eq!(expand_braces("/{srv,media}"), ["/srv", "/media"]);
        assert_eq!(
            expand_braces("/x/{a,{b,c}}/y"),
            ["/x/a/y", "/x/b/y", "/x/c/y"]
        );
        assert_eq!(expand_braces("{1..3}"), ["{1..3}"]);
        assert_eq!(expand_braces("plain"), ["plain"]);
    }

    #[test]
    fn globs_that_can_match_a_protected_directory_are_protected() {
        let known = Cwd::Known("/work/p".into());
        for target in [
            "/sr*",
            "/sr*/",
            "/s?v",
            "/[s]rv",
            "/h*/dev",
            "/{tmp,srv}",
            "/*/",
            "~/[a-z]*",
            "/home/dev/.[!.]*",
            "../../../*",
            "/u*r",
        ] {
            let target = target.replace('~', "/home/dev");
            assert!(
                matches!(
                    protection(&target, &known, &env()),
                    Protection::Protected(_)
                ),
                "{target}"
            );
        }
        for target in [
            "/tmp/build-*",
            "/srv/app/cache/*",
            "build",
            "./*.o",
            "/home/dev/p/*",
        ] {
            assert_eq!(
                protection(target, &known, &env()),
                Protection::Safe,
                "{target}"
            );
        }
        assert_eq!(
            protection("*", &Cwd::Unknown, &env()),
            Protection::Unevaluable
        );
        assert_eq!(
            protection("x\u{1}", &known, &env()),
            Protection::Unevaluable
        );
    }

    #[test]
    fn long_options_match_by_unambiguous_prefix() {
        let rm = [
            "--recursive",
            "--force",
            "--no-preserve-root",
            "--preserve-root",
        ];
        assert_eq!(long_option("--recur", &rm), Some("--recursive"));
        assert_eq!(long_option("--r", &rm), Some("--recursive"));
        assert_eq!(long_option("--no-p", &rm), Some("--no-preserve-root"));
        assert_eq!(long_option("--p", &rm), Some("--preserve-root"));
        let chmod = ["--recursive", "--reference"];
        assert_eq!(long_option("--re", &chmod), None);
        assert_eq!(long_option("--rec", &chmod), Some("--recursive"));
        assert_eq!(long_option("--reference=x", &chmod), Some("--reference"));
        assert!(has_option(
            &["--forc", "--recur"],
            Some('r'),
            "--recursive",
            &rm
        ));
        assert!(!has_option(
            &["--", "--recursive"],
            Some('r'),
            "--recursive",
            &rm
        ));
    }
}
