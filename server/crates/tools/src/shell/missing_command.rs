//! What to suggest when a command was not found (exit code 127): the usual substitutes this
//! machine has (`python3 -m pytest` for `pytest`, `python3` for `python`…), else programs on
//! `PATH` whose names are a typo away.

use std::collections::BTreeSet;
use std::path::PathBuf;

/// Known substitutes: the missing program, and what to try instead (the first word of each
/// must be on `PATH`).
const SUBSTITUTES: &[(&str, &[&str])] = &[
    ("pytest", &["python3 -m pytest", "python3 -m unittest"]),
    ("py.test", &["python3 -m pytest", "python3 -m unittest"]),
    ("python", &["python3"]),
    ("pip", &["python3 -m pip", "pip3"]),
    ("pip3", &["python3 -m pip"]),
    ("nosetests", &["python3 -m unittest"]),
    ("rg", &["grep -rn"]),
    ("fd", &["find"]),
    ("node", &["nodejs"]),
    ("nodejs", &["node"]),
    ("vim", &["vi"]),
    ("make", &["cmake --build ."]),
    ("cc", &["gcc", "clang"]),
    ("gcc", &["cc", "clang"]),
    ("clang", &["cc", "gcc"]),
    ("docker-compose", &["docker compose"]),
    ("ipython", &["python3"]),
];

/// A line for the model after a command that was not found, naming what it can run instead;
/// `None` when the output names no missing command.
pub async fn hint(output: &str) -> Option<String> {
    let missing = missing_program(output)?;
    let on_path = programs_on_path().await;
    let substitutes: Vec<&str> = SUBSTITUTES
        .iter()
        .filter(|(name, _)| *name == missing)
        .flat_map(|(_, instead)| instead.iter().copied())
        .filter(|instead| {
            instead
                .split_whitespace()
                .next()
                .is_some_and(|program| on_path.contains(program))
        })
        .collect();
    let mut hint = format!("`{missing}` is not installed here.");
    if !substitutes.is_empty() {
        let named: Vec<String> = substitutes.iter().map(|s| format!("`{s}`")).collect();
        hint.push_str(&format!(" Try {} instead.", named.join(" or ")));
        return Some(hint);
    }
    let close: Vec<String> = on_path
        .iter()
        .filter(|name| name.len() > 2 && typo_away(name, &missing))
        .take(3)
        .map(|name| format!("`{name}`"))
        .collect();
    if close.is_empty() {
        hint.push_str(" Look for another way to do the same with what is installed.");
    } else {
        hint.push_str(&format!(" Did you mean {}?", close.join(" or ")));
    }
    Some(hint)
}

/// The program the shell could not find, from its message (`sh: 1: pytest: not found`,
/// `bash: pytest: command not found`, `env: 'pytest': No such file or directory`).
fn missing_program(output: &str) -> Option<String> {
    output.lines().rev().find_map(|line| {
        let line = line.trim();
        let before = line
            .strip_suffix(": command not found")
            .or_else(|| line.strip_suffix(": not found"))
            .or_else(|| line.strip_suffix(": No such file or directory"))?;
        let name = before.rsplit(": ").next()?.trim_matches(['\'', '"', '`']);
        let valid = !name.is_empty()
            && !name.contains(char::is_whitespace)
            && !name.starts_with('/')
            && !name.starts_with('.');
        valid.then(|| name.to_string())
    })
}

/// The names of the programs in `PATH`'s folders.
async fn programs_on_path() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let Some(path) = std::env::var_os("PATH") else {
        return names;
    };
    let folders: Vec<PathBuf> = std::env::split_paths(&path).collect();
    for folder in folders {
        let Ok(mut entries) = tokio::fs::read_dir(&folder).await else {
            continue;
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            if let Some(name) = entry.file_name().to_str() {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// Whether `a` and `b` differ by one edit (or two letters swapped).
fn typo_away(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a == b || a.len().abs_diff(b.len()) > 1 {
        return false;
    }
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let longest = a.len().max(b.len());
    if prefix + suffix + 1 >= longest {
        return true;
    }
    // Two neighbours swapped.
    a.len() == b.len()
        && prefix + 2 + suffix == a.len()
        && a[prefix] == b[prefix + 1]
        && a[prefix + 1] == b[prefix]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_program_is_read_from_each_shell_message() {
        for (output, name) in [
            ("sh: 1: pytest: not found", "pytest"),
            ("bash: line 1: pytest: command not found", "pytest"),
            ("/bin/sh: pyhton: command not found", "pyhton"),
            ("env: 'node': No such file or directory", "node"),
            (
                "zsh: command not found: rg\nbash: rg: command not found",
                "rg",
            ),
        ] {
            assert_eq!(missing_program(output).as_deref(), Some(name), "{output}");
        }
        assert_eq!(missing_program("all good"), None);
    }

    #[test]
    fn typos_are_one_edit_away() {
        assert!(typo_away("python3", "pyhton3"));
        assert!(typo_away("cargo", "carg"));
        assert!(typo_away("git", "gti"));
        assert!(!typo_away("python3", "perl"));
        assert!(!typo_away("ls", "ls"));
    }

    #[tokio::test]
    async fn a_missing_pytest_points_at_python3_when_it_is_there() {
        let on_path = programs_on_path().await;
        let hint = hint("sh: 1: pytest: not found").await.expect("a hint");
        if on_path.contains("python3") {
            assert!(
                hint.contains("`python3 -m pytest`") && hint.contains("`python3 -m unittest`"),
                "{hint}"
            );
        } else {
            assert!(hint.contains("not installed"), "{hint}");
        }
    }
}
