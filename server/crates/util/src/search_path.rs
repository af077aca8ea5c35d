//! Where a program named by a bare word is looked for: only the `PATH` entries that name a
//! fixed folder. An empty or relative entry (`.`, `node_modules/.bin`) is looked up from
//! wherever the process stands, and an entry inside a working folder is what a model's
//! commands can fill: a program planted there is never the one started.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The entries of `given` that are absolute and inside none of `working` (the root `/`, or
/// an empty path, is never counted as a working folder: everything is inside it).
pub fn fixed_entries(given: &OsStr, working: &[&Path]) -> OsString {
    let working: Vec<&Path> = working
        .iter()
        .copied()
        .filter(|dir| !dir.as_os_str().is_empty() && *dir != Path::new("/"))
        .collect();
    let kept: Vec<PathBuf> = std::env::split_paths(given)
        .filter(|entry| entry.is_absolute())
        .filter(|entry| !working.iter().any(|dir| entry.starts_with(dir)))
        .collect();
    std::env::join_paths(kept).unwrap_or_default()
}

/// The program `command` names: a path as given, a bare name found on `path` (an executable
/// file in one of its entries).
pub fn program_on(command: &str, path: &OsStr) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if command.contains('/') {
        return Ok(PathBuf::from(command));
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(command))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{command} is not on PATH (its relative entries, and those inside the \
                     folder the agent works in, are not searched)"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_entries_outside_the_working_folders_are_kept() {
        let kept = fixed_entries(
            OsStr::new(".:bin::/usr/bin:/work/ws/node_modules/.bin:/opt/x/bin:/work/other"),
            &[Path::new("/work/ws"), Path::new("/"), Path::new("")],
        );
        assert_eq!(kept, OsString::from("/usr/bin:/opt/x/bin:/work/other"));
    }

    #[test]
    fn a_program_is_found_only_where_it_is_executable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let (plain, tool) = (dir.path().join("plain"), dir.path().join("tool"));
        std::fs::write(&plain, "x").expect("plain");
        std::fs::write(&tool, "x").expect("tool");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("mode");
        let path = dir.path().as_os_str();
        assert_eq!(program_on("tool", path).expect("found"), tool);
        assert!(program_on("plain", path).is_err());
        assert!(program_on("absent", path).is_err());
        assert_eq!(
            program_on("./x", path).expect("as given"),
            PathBuf::from("./x")
        );
    }
}
