//! Processes a command left behind: finding them (the descendants of a subreaper, or every
//! process of a PID namespace), ending them, and counting the user's processes (for the
//! process limit where there is no user namespace to count in).

use std::collections::{BTreeMap, BTreeSet};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

/// Sets the process limit to `wanted`, or to the hard limit where that is lower (raising a
/// hard limit needs a privilege no command has, so asking would fail every command).
/// Returns the limit set.
pub fn limit_processes_to(wanted: u64) -> nix::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NPROC)?;
    let limit = clamped(wanted, hard);
    setrlimit(Resource::RLIMIT_NPROC, limit, limit)?;
    Ok(limit)
}

/// `wanted`, or `hard` where it is lower.
fn clamped(wanted: u64, hard: u64) -> u64 {
    wanted.min(hard)
}

/// The parent of every process visible in `/proc`.
fn parents() -> BTreeMap<i32, i32> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: the command name may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
            continue;
        };
        if let Some(ppid) = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<i32>().ok())
        {
            out.insert(pid, ppid);
        }
    }
    out
}

/// The processes below `root` (not itself).
pub fn descendants(root: i32) -> Vec<i32> {
    let parents = parents();
    let mut below: BTreeSet<i32> = BTreeSet::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (&pid, &ppid) in &parents {
            if ppid == parent && pid != root && below.insert(pid) {
                frontier.push(pid);
            }
        }
    }
    below.into_iter().collect()
}

/// Whether the caller has children that have not been reaped (live or not).
pub fn has_children() -> bool {
    !matches!(
        waitid(
            Id::All,
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT
        ),
        Err(Errno::ECHILD)
    )
}

/// Reaps every child that has ended, without waiting.
pub fn reap_ended() -> Vec<(Pid, WaitStatus)> {
    let mut out = Vec::new();
    while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        match status.pid() {
            Some(pid) => out.push((pid, status)),
            None => break,
        }
    }
    out
}

/// Ends what `find` lists until nothing is left (a process may fork while it is being
/// killed; its orphans come back to the caller), reaping as it goes. Returns how many
/// processes were ended. Gives up after about two seconds.
pub fn end_all(find: impl Fn() -> Vec<i32>) -> usize {
    let started = std::time::Instant::now();
    let mut ended = BTreeSet::new();
    loop {
        let found = find();
        if found.is_empty() {
            break;
        }
        for &pid in &found {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            ended.insert(pid);
        }
        reap_ended();
        if started.elapsed() > std::time::Duration::from_secs(2) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    // Children killed above that had not ended yet.
    while has_children() && started.elapsed() < std::time::Duration::from_secs(3) {
        if reap_ended().is_empty() {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
    ended.len()
}

/// Every process of this PID namespace but the caller (its init).
pub fn namespace_members() -> Vec<i32> {
    let own = std::process::id() as i32;
    parents().into_keys().filter(|&pid| pid != own).collect()
}

/// How many threads run on the machine now (`/proc/loadavg`'s total), the baseline for the
/// process limit where there is no user namespace to count in: `RLIMIT_NPROC` then counts
/// every process (and thread) of the user, and the machine's total is never less than that.
/// One small read, where counting the user's own would stat every process.
pub fn machine_task_count() -> u64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| {
            text.split_whitespace()
                .nth(3)
                .and_then(|field| field.split('/').nth(1))
                .and_then(|total| total.parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_counted_and_children_found() {
        assert!(machine_task_count() >= 1);
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let own = std::process::id() as i32;
        assert!(descendants(own).contains(&(child.id() as i32)));
        // Reaping is the supervisor's (a single-threaded process); here the test's own.
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn the_limit_never_rises_above_the_hard_limit() {
        assert_eq!(clamped(512, 100), 100);
        assert_eq!(clamped(512, u64::MAX), 512);
        assert_eq!(clamped(0, 10), 0);
    }
}
