//! The user's home folders, as commands may find them: `HOME` when it is set, and the home
//! of the user's passwd entry (which a command finds even when `HOME` is unset or points
//! elsewhere). Credential stores are hidden under both.

use std::path::PathBuf;

/// `HOME` (when set and not empty) and the passwd entry's home (when it differs), in that
/// order, without duplicates. Looked up once per process (the user database is read once).
pub fn user_homes() -> Vec<PathBuf> {
    static HOMES: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    HOMES
        .get_or_init(|| {
            homes_from(
                std::env::var_os("HOME")
                    .filter(|h| !h.is_empty())
                    .map(PathBuf::from),
                passwd_home(),
            )
        })
        .clone()
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

/// The home folder of this process's real user in the user database: `/etc/passwd` read
/// directly for a local user (the usual case, without loading the name service's modules into
/// the agent), the name service for others (LDAP, SSSD…).
#[cfg(unix)]
pub fn passwd_home() -> Option<PathBuf> {
    let uid = nix::unistd::Uid::current().as_raw();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| home_in_passwd(&passwd, uid))
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::Uid::current())
                .ok()
                .flatten()
                .map(|user| user.dir)
        })
}

/// The home of `uid` in `/etc/passwd`'s text (`name:x:uid:gid:gecos:home:shell`).
fn home_in_passwd(passwd: &str, uid: u32) -> Option<PathBuf> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 7 && fields[2].parse::<u32>().ok() == Some(uid))
            .then(|| PathBuf::from(fields[5]))
    })
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
    fn a_local_users_home_is_read_from_the_passwd_file() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      # a comment\n\
                      dev:x:1000:1000:Dev,,,:/home/dev:/bin/zsh\n";
        assert_eq!(
            home_in_passwd(passwd, 1000),
            Some(PathBuf::from("/home/dev"))
        );
        assert_eq!(home_in_passwd(passwd, 0), Some(PathBuf::from("/root")));
        assert_eq!(home_in_passwd(passwd, 42), None);
    }

    #[test]
    fn the_passwd_entry_is_found() {
        assert!(passwd_home().is_some(), "this user has a passwd entry");
    }
}
