//! Which UNIX sockets a command must not reach. A filter cannot read the path a `connect`
//! names and Landlock does not govern connecting, so with namespaces the sandbox masks every
//! bound socket the kernel lists (`/proc/net/unix`) that lies outside the writable places and
//! is not allowed by `[sandbox] unix_sockets`: a masked path is `/dev/null` in the command's
//! mount namespace. (Without namespaces the filter refuses creating UNIX sockets at all.)

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;

use crate::policy::SandboxPolicy;

/// The absolute paths of the bound sockets in `/proc/net/unix`'s text (abstract ones start
/// with `@` and are scoped by Landlock instead; a socket bound by a relative path names no
/// place and cannot be masked).
pub fn bound_paths(table: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for line in table.lines().skip(1) {
        // Num RefCount Protocol Flags Type St Inode Path (the path may hold spaces).
        let Some(path) = after_fields(line, 7) else {
            continue;
        };
        if path.starts_with('/') && !out.iter().any(|p| p.as_os_str() == path) {
            out.push(PathBuf::from(path));
        }
    }
    out
}

/// What follows the first `n` whitespace-separated fields of `line`, trimmed.
fn after_fields(line: &str, n: usize) -> Option<&str> {
    let mut rest = line.trim_start();
    for _ in 0..n {
        let end = rest.find(char::is_whitespace)?;
        rest = rest[end..].trim_start();
    }
    let rest = rest.trim_end();
    (!rest.is_empty()).then_some(rest)
}

/// The sockets to mask for `policy`: bound, still there as sockets, not allowed.
pub fn to_mask(policy: &SandboxPolicy) -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return Vec::new();
    };
    bound_paths(&table)
        .into_iter()
        .filter(|path| !policy.socket_allowed(path))
        .filter(|path| std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_paths_are_read_from_the_kernel_table() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
0000000000000000: 00000002 00000000 00010000 0001 01 21837 /run/user/1000/bus\n\
0000000000000000: 00000002 00000000 00010000 0001 01 21838 @/tmp/.X11-unix/X0\n\
0000000000000000: 00000003 00000000 00000000 0001 03 21839\n\
0000000000000000: 00000002 00000000 00010000 0001 01 21840 /tmp/ssh-x/agent.42\n\
0000000000000000: 00000002 00000000 00010000 0001 01 21841 relative.sock\n\
0000000000000000: 00000002 00000000 00010000 0001 01 21842 /run/user/1000/bus\n";
        assert_eq!(
            bound_paths(table),
            [
                PathBuf::from("/run/user/1000/bus"),
                PathBuf::from("/tmp/ssh-x/agent.42")
            ]
        );
    }

    #[test]
    fn sockets_in_writable_places_and_listed_ones_stay_reachable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let (work, outside) = (root.join("work"), root.join("outside"));
        for folder in [&work, &outside] {
            std::fs::create_dir(folder).expect("mkdir");
        }
        let listeners: Vec<_> = ["work/a.sock", "outside/b.sock", "outside/c.sock"]
            .iter()
            .map(|name| std::os::unix::net::UnixListener::bind(root.join(name)).expect("bind"))
            .collect();
        let policy = SandboxPolicy {
            writable: vec![work.clone()],
            unix_sockets: vec![outside.join("c.sock")],
            ..SandboxPolicy::default()
        };
        let masked = to_mask(&policy);
        assert!(masked.contains(&outside.join("b.sock")), "{masked:?}");
        assert!(!masked.contains(&work.join("a.sock")), "{masked:?}");
        assert!(!masked.contains(&outside.join("c.sock")), "{masked:?}");
        drop(listeners);
    }
}
