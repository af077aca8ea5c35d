//! The hard floor: commands refused in every mode. Recursive deletes (and moves, ownership and
//! permission changes) of the root, the home directory or a system directory; formatting and
//! overwriting disks; stopping the machine; signalling every process. Download-and-run and
//! fork bombs are found while walking (they need the pipeline and the function around them).
//!
//! Targets are normalised before they are compared: quotes and escapes are already gone;
//! `~`, `$HOME` and a static `cd` are applied; `//`, `/./`, `/.`, `..`, trailing slashes and
//! trailing globs (`/*`, `/.*`) are folded.

use super::ShellEnv;
use super::walk::{Cwd, Walker};
use super::words::{UNKNOWN, Word};

const SYSTEM_DIRS: &[&str] = &[
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

/// Whether deleting `target` recursively would destroy the system or the user's home.
pub(super) fn is_protected(target: &str, cwd: &Cwd, env: &ShellEnv) -> bool {
    let mut target = target.trim().to_string();
    if target.is_empty() || target.contains(UNKNOWN) {
        return false;
    }
    // Trailing globs: `/*`, `~/.*`, `*` (everything in that directory).
    loop {
        let before = target.len();
        for suffix in ["/*", "/.*", "/.[!.]*", "/..?*"] {
            if let Some(stripped) = target.strip_suffix(suffix) {
                target = if stripped.is_empty() {
                    "/".into()
                } else {
                    stripped.into()
                };
            }
        }
        if matches!(target.as_str(), "*" | ".*") {
            target = ".".into();
        }
        if target.len() == before {
            break;
        }
    }
    let Some(path) = normalize(&target, cwd) else {
        return false;
    };
    if path == "/" || SYSTEM_DIRS.contains(&path.as_str()) {
        return true;
    }
    env.home
        .as_deref()
        .is_some_and(|home| normalize(home, &Cwd::Session).is_some_and(|home| path == home))
}

/// Whether `path` names a disk or partition device.
pub(super) fn is_block_device(path: &str) -> bool {
    let Some(name) =
        normalize(path, &Cwd::Session).and_then(|p| p.strip_prefix("/dev/").map(str::to_string))
    else {
        return false;
    };
    [
        "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk", "rdisk", "md", "dm-", "sr", "loop",
        "mapper/", "nbd",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

fn has_flag(texts: &[&str], short: char, long: &str) -> bool {
    texts.iter().take_while(|t| **t != "--").any(|t| {
        *t == long || (t.starts_with('-') && !t.starts_with("--") && t[1..].contains(short))
    })
}

/// Operands: the words that are not options (everything after `--`).
fn operands(args: &[Word]) -> Vec<&Word> {
    let mut out = Vec::new();
    let mut options_done = false;
    for arg in args {
        if !options_done && arg.text == "--" {
            options_done = true;
        } else if options_done || !arg.text.starts_with('-') || arg.text == "-" {
            out.push(arg);
        }
    }
    out
}

/// Checks one program and its arguments against the floor.
pub(super) fn check(walker: &mut Walker, program: &str, args: &[Word]) {
    let texts: Vec<&str> = args.iter().map(|a| a.text.as_str()).collect();
    let protected =
        |walker: &Walker, word: &Word| is_protected(&word.text, &walker.cwd, walker.env);
    match program {
        "rm" => {
            if texts.contains(&"--no-preserve-root") {
                walker.refuse("rm --no-preserve-root");
            }
            let recursive =
                has_flag(&texts, 'r', "--recursive") || has_flag(&texts, 'R', "--recursive");
            if recursive
                && let Some(target) = operands(args).into_iter().find(|w| protected(walker, w))
            {
                walker.refuse(format!(
                    "recursive delete of `{}` (the root, home or a system directory)",
                    target.shown()
                ));
            }
        }
        "mv" => {
            let operands = operands(args);
            if let Some((_, sources)) = operands.split_last()
                && let Some(source) = sources.iter().find(|w| protected(walker, w))
            {
                walker.refuse(format!(
                    "moving `{}` away (the root, home or a system directory)",
                    source.shown()
                ));
            }
        }
        "chmod" | "chown" | "chgrp"
            if has_flag(&texts, 'R', "--recursive")
                && operands(args)
                    .into_iter()
                    .skip(1)
                    .any(|w| protected(walker, w)) =>
        {
            walker.refuse(format!(
                "recursive {program} of the root, home or a system directory"
            ));
        }
        "dd" => {
            if let Some(target) = texts.iter().find_map(|t| t.strip_prefix("of="))
                && is_block_device(target)
            {
                walker.refuse(format!("dd onto the block device {target}"));
            }
        }
        "tee" | "cp" => {
            if let Some(device) = operands(args)
                .into_iter()
                .find(|w| is_block_device(&w.text))
            {
                walker.refuse(format!("{program} onto the block device {}", device.text));
            }
        }
        "shred" if texts.iter().any(|t| is_block_device(t)) => {
            walker.refuse("shred destroys disk contents");
        }
        "wipefs" | "blkdiscard" | "mke2fs" | "mkswap" | "fdisk" | "sfdisk" | "parted" | "gdisk"
        | "sgdisk" | "cfdisk" => {
            walker.refuse(format!("{program} rewrites disks or partitions"));
        }
        p if p == "mkfs" || p.starts_with("mkfs.") => {
            walker.refuse(format!("{p} formats a file system"));
        }
        "shutdown" | "reboot" | "halt" | "poweroff" => {
            walker.refuse(format!("{program} stops the machine"));
        }
        "init" | "telinit" if texts.first().is_some_and(|t| matches!(*t, "0" | "6")) => {
            walker.refuse(format!("{program} {} stops the machine", texts[0]));
        }
        "systemctl"
            if texts.iter().any(|t| {
                matches!(
                    *t,
                    "poweroff" | "reboot" | "halt" | "kexec" | "suspend" | "hibernate"
                )
            }) =>
        {
            walker.refuse("a systemctl power action stops the machine");
        }
        "kill" if kills_everything(&texts) => walker.refuse("kill -1 signals every process"),
        _ => {}
    }
}

/// `kill -9 -1`, `kill -- -1`, `kill -s KILL -1`: the pid -1 is every process.
fn kills_everything(texts: &[&str]) -> bool {
    let mut index = 0;
    if let Some(first) = texts.first() {
        if matches!(*first, "-s" | "-n") {
            index = 2;
        } else if *first == "--" {
            index = 1;
        } else if first.starts_with('-') && texts.len() > 1 {
            // The signal (`-9`, `-KILL`); a lone `kill -1` would be pid -1 too.
            index = 1;
        }
    }
    texts
        .iter()
        .skip(index)
        .skip_while(|t| **t == "--")
        .any(|t| *t == "-1")
}
