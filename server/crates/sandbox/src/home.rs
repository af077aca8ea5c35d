//! The user's home folders, as commands may find them: `HOME` when it is set, and the home
//! of the user's passwd entry (which a command finds even when `HOME` is unset or points
//! elsewhere). Credential stores are hidden under both.

use std::path::PathBuf;

/// `HOME` (when set and not empty) and the passwd entry's home (when it differs), in that
/// order, without duplicates.
pub fn user_homes() -> Vec<PathBuf> {
    homes_from(
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from),
        passwd_home(),
    )
}

fn homes_from(env: Option<PathBuf>, passwd: Option<PathBuf>) -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = Vec::new();
    for home in env.into_iter().chain(passwd) {
        if home.as_os_str().is_empty() || home == std::path::Path::new("/") {
            continue;
        }
        if !homes.contains(&home) {
            homes.push(home);
        }
    }
    homes
}

/// The home folder of this process's real user in the user database.
#[cfg(unix)]
pub fn passwd_home() -> Option<PathBuf> {
    nix::unistd::User::from_uid(nix::unistd::Uid::current())
        .ok()
        .flatten()
        .map(|user| user.dir)
}

#[cfg(not(unix))]
pub fn passwd_home() -> Option<PathBuf> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_homes_without_duplicates() {
        assert_eq!(
            homes_from(Some("/home/a".into()), Some("/home/b".into())),
            [PathBuf::from("/home/a"), PathBuf::from("/home/b")]
        );
        assert_eq!(
            homes_from(Some("/home/a".into()), Some("/home/a".into())),
            [PathBuf::from("/home/a")]
        );
        assert_eq!(
            homes_from(None, Some("/home/b".into())),
            [PathBuf::from("/home/b")]
        );
        assert!(homes_from(Some("/".into()), None).is_empty());
    }

    #[test]
    fn the_passwd_entry_is_found() {
        assert!(passwd_home().is_some(), "this user has a passwd entry");
    }
}
