//! The supervisor of one command: `talaria-sandbox __sandbox PROGRAM ARGS…`. It makes a
//! session of its own (so the command has no controlling terminal) and ends everything the
//! command started when the command ends, when it is told to stop, and when its parent
//! (Talaria, or an editor) dies.
//!
//! With namespaces it moves into the sandbox's namespaces (`namespace.rs`) and starts the
//! init, the first process of the PID namespace: when the init ends, the kernel ends every
//! process in it, however it detached; the supervisor stays outside the sandbox, where
//! nothing the command runs can see it. Without them it enters the sandbox itself and starts
//! the command directly (one program start per command, not two), as a child subreaper:
//! whatever the command leaves running is reparented to it and ended; the filters keep
//! everything in its process group (which Talaria kills when a call is cancelled or times
//! out) and keep the command from signalling, tracing or touching the supervisor alone; it
//! blocks every signal it can, is not dumpable, and a signal to the whole group ends the
//! command with it.

use std::process::ExitCode;

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, getppid};

use crate::SandboxError;
use crate::procs;
use crate::request::{INIT_ARG, Request, SPEC_ENV, give_up, report_leftovers};
use crate::signals::{Event, PARENT_DEATH, Signals, exit_code, stopped_by};

/// How the supervisor ends what a command started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Kill the init: its PID namespace goes with it.
    Namespace,
    /// Kill every descendant (the supervisor is their subreaper).
    Tree,
}

/// Runs the supervisor; returns the command's exit code.
pub fn run(request: Request) -> ExitCode {
    let parent = getppid();
    // Fails only when already a group leader (started so by an editor): then the session
    // stays the one the editor gave it.
    let _ = nix::unistd::setsid();
    if nix::sys::prctl::set_pdeathsig(PARENT_DEATH).is_err() || getppid() != parent {
        return give_up(&SandboxError::Exec(
            "the process that started it is gone".into(),
        ));
    }
    let mut signals = match Signals::block() {
        Ok(signals) => signals,
        Err(why) => return give_up(&why),
    };
    let Prepared {
        mut command,
        ending,
        init_spec,
        handed_log,
    } = match prepare(&request) {
        Ok(prepared) => prepared,
        Err(why) => return give_up(&why),
    };
    if let Some(rules) = &request.spec.env {
        command.env_clear().envs(rules.apply(std::env::vars_os()));
    }
    // The specification stops here: the command never sees it; the init gets its own.
    command.env_remove(SPEC_ENV);
    if let Some(spec) = init_spec {
        command.env(SPEC_ENV, spec);
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return give_up(&SandboxError::Exec(format!(
                "cannot execute {}: {e}",
                request.program.to_string_lossy()
            )));
        }
    };
    // The init holds its own copy of the log now.
    drop(handed_log);
    let main = Pid::from_raw(child.id() as i32);
    // The child is reaped below, by pid; the handle is not used again.
    drop(child);
    supervise(main, parent, ending, &mut signals, max_processes(&request))
}

fn max_processes(request: &Request) -> u32 {
    request.spec.sandbox.as_ref().map_or(0, |p| p.max_processes)
}

/// What [`prepare`] made ready.
struct Prepared {
    command: std::process::Command,
    ending: Ending,
    /// The init's specification, when the command is the init.
    init_spec: Option<String>,
    /// The refusal log the init inherits, kept open until it is started.
    handed_log: Option<std::fs::File>,
}

impl Prepared {
    fn tree(command: std::process::Command) -> Self {
        Self {
            command,
            ending: Ending::Tree,
            init_spec: None,
            handed_log: None,
        }
    }
}

/// What to start and how its leftovers end: the init in the namespaces (with the
/// specification it is handed), the program in the sandbox without them, or (unconfined) the
/// program itself.
fn prepare(request: &Request) -> Result<Prepared, SandboxError> {
    let Some(policy) = &request.spec.sandbox else {
        set_subreaper()?;
        let mut command = std::process::Command::new(&request.program);
        command.args(&request.args);
        return Ok(Prepared::tree(command));
    };
    // Opened before anything is entered: the log lies where commands cannot reach.
    let log = open_log(&request.spec);
    // The rules that depend on the moment, once: files matched by name, other sessions'
    // folders, registered servers, every name the mount table gives a hidden place.
    let resolved = policy.resolved();
    let inside = if policy.namespaces && !policy.let_out {
        match crate::namespace::enter(&resolved) {
            Ok(inside) => Some(inside),
            Err(SandboxError::NoNamespaces(_)) if !request.spec.require_namespaces => None,
            Err(why) => return Err(why),
        }
    } else {
        None
    };
    if let Some(inside) = inside {
        return start_init(request, inside, log);
    }
    let (landlock, masked) = if policy.let_out {
        let let_out = crate::let_out::hide(&resolved)?;
        (let_out.landlock, let_out.masked)
    } else {
        (resolved, false)
    };
    if !masked {
        // The machine's mount table: a mount made while the command runs could name a hidden
        // place anew.
        crate::mount_watch::start(landlock.hidden.clone())?;
    }
    set_subreaper()?;
    limit_processes(policy.max_processes)?;
    let _ = nix::sys::prctl::set_dumpable(false);
    crate::enter_as_watcher(&landlock, false, log)?;
    let mut command = std::process::Command::new(&request.program);
    command.args(&request.args);
    Ok(Prepared::tree(command))
}

/// The init, in the namespaces: it enters Landlock with the policy left once the masks are
/// in place, and inherits the log (this process starts nothing else).
fn start_init(
    request: &Request,
    inside: crate::policy::SandboxPolicy,
    log: Option<std::fs::File>,
) -> Result<Prepared, SandboxError> {
    let refusals_fd = log.as_ref().and_then(hand_to_next_program);
    let spec = crate::policy::HelperSpec {
        sandbox: Some(inside),
        refusals: None,
        refusals_fd,
        ..request.spec.clone()
    };
    let spec_text = serde_json::to_string(&spec)
        .map_err(|e| SandboxError::Arguments(format!("the init's specification: {e}")))?;
    let mut command = std::process::Command::new("/proc/self/exe");
    command
        .arg(INIT_ARG)
        .arg(&request.program)
        .args(&request.args);
    Ok(Prepared {
        command,
        ending: Ending::Namespace,
        init_spec: Some(spec_text),
        handed_log: log.filter(|_| refusals_fd.is_some()),
    })
}

/// The command's refusal log, opened for appending without following a link (none when
/// there is no log or it cannot be opened: refusals are then only answered).
fn open_log(spec: &crate::policy::HelperSpec) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = spec.refusals.as_ref()?;
    std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()
}

/// Lets the next program this process executes inherit `log`; returns its number.
fn hand_to_next_program(log: &std::fs::File) -> Option<i32> {
    use std::os::fd::AsRawFd;
    rustix::io::fcntl_setfd(log, rustix::io::FdFlags::empty()).ok()?;
    Some(log.as_raw_fd())
}

fn set_subreaper() -> Result<(), SandboxError> {
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| SandboxError::Exec(format!("cannot adopt the command's processes: {e}")))
}

/// Without a user namespace the process limit counts every process of the user: allow
/// `max` more than the machine runs now (at least as many as the user's; so a command may
/// start somewhat more than `max` where other users run many), never above the user's hard
/// limit (which then bounds the command, as it bounds everything the user runs).
fn limit_processes(max: u32) -> Result<(), SandboxError> {
    if max == 0 {
        return Ok(());
    }
    procs::limit_processes_to(procs::machine_task_count() + u64::from(max))
        .map(|_| ())
        .map_err(|e| SandboxError::Exec(format!("cannot limit processes: {e}")))
}

fn end(main: Pid, ending: Ending) -> usize {
    match ending {
        Ending::Namespace => {
            let _ = kill(main, Signal::SIGKILL);
            procs::end_all(Vec::new)
        }
        Ending::Tree => {
            let own = std::process::id() as i32;
            procs::end_all(|| procs::descendants(own))
        }
    }
}

fn supervise(
    main: Pid,
    parent: Pid,
    ending: Ending,
    signals: &mut Signals,
    max_processes: u32,
) -> ExitCode {
    let status = loop {
        match signals.next() {
            Event::Child => {
                if let Some((_, status)) = procs::reap_ended().into_iter().find(|(p, _)| *p == main)
                {
                    break status;
                }
            }
            Event::ParentDeath if getppid() == parent => {} // only a thread of it ended
            Event::ParentDeath => {
                end(main, ending);
                return ExitCode::from(1);
            }
            Event::Stop(signal) => {
                end(main, ending);
                return stopped_by(signal);
            }
        }
    };
    let mut code = exit_code(status);
    if ending == Ending::Tree && procs::has_children() {
        let left = end(main, ending);
        code = report_leftovers(left, max_processes, code);
    }
    ExitCode::from(code)
}
