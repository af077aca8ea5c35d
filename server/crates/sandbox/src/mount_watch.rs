//! Without namespaces, the mount table is the machine's: a mount made while a command runs
//! (a bind mount of the home, a FUSE view of it) gives a hidden place a name no Landlock rule
//! was made for, and Landlock, which grants folders by what lies beneath them, lets it be
//! read there. The kernel offers no way to keep a running command off such a mount, so the
//! supervisor watches the table (`/proc/self/mountinfo` signals each change) and ends the
//! command at once when a change shows a hidden place at a new name, and says why.
//! (With namespaces the command's mount table is its own: nothing mounted outside reaches
//! it.)

use std::io::{Read, Seek};
use std::os::fd::AsFd;
use std::path::PathBuf;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::SandboxError;

/// Starts the thread that watches the mount table for new names of `hidden` (the resolved
/// hidden places, their known names among them). Called before the supervisor enters the
/// sandbox, so the thread may end the command's whole process group.
pub(crate) fn start(hidden: Vec<PathBuf>) -> Result<(), SandboxError> {
    let failed = |e: std::io::Error| SandboxError::Exec(format!("watching the mounts: {e}"));
    let table = std::fs::File::open("/proc/self/mountinfo").map_err(failed)?;
    std::thread::Builder::new()
        .name("sandbox-mounts".into())
        .spawn(move || watch(table, &hidden))
        .map_err(failed)?;
    Ok(())
}

/// Waits for each change of the table; ends the command at the first new name of a hidden
/// place.
fn watch(mut table: std::fs::File, hidden: &[PathBuf]) {
    loop {
        let mut fds = [PollFd::new(table.as_fd(), PollFlags::POLLPRI)];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        let mut text = String::new();
        if table.rewind().is_err() || table.read_to_string(&mut text).is_err() {
            return;
        }
        let new = crate::aliases::of_in(&text, hidden);
        if let Some(name) = new.first() {
            end_the_command(name);
            return;
        }
    }
}

/// Ends everything in the supervisor's process group (the command and all it started: the
/// filters keep them there), the supervisor with it, after saying why.
fn end_the_command(name: &std::path::Path) {
    eprintln!(
        "talaria sandbox: a mount made while the command ran shows a hidden place at {}; the \
         command was ended",
        name.display()
    );
    let own = nix::unistd::getpid();
    let group = nix::unistd::getpgrp();
    let signal = nix::sys::signal::Signal::SIGKILL;
    if group == own {
        let _ = nix::sys::signal::killpg(group, signal);
    }
    // Not a group of its own (started so by another program): the command's processes, then
    // itself.
    for pid in crate::procs::descendants(own.as_raw()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
    let _ = nix::sys::signal::kill(own, signal);
}
