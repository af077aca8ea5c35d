//! The hard floor: commands refused in every mode. Recursive deletes (and moves, ownership and
//! permission changes) of the root, the home directory or a system directory; formatting,
//! overwriting and erasing disks; stopping the machine; signalling every process or init.
//! Download-and-run and fork bombs are found while walking (they need the pipeline and the
//! function around them).
//!
//! Targets are normalised before they are compared (`targets.rs`): quotes and escapes are
//! already gone; `~`, `$HOME` and a static `cd` are applied; `//`, `/./`, `..`, trailing
//! slashes and globs are folded; braces are expanded; a glob that can match a protected
//! directory counts as matching it. A floor program given a target (or an option) only known
//! at run time cannot be proven safe: the command is `unknown`, so it asks in every mode.

use super::Walker;
use crate::shell::safety::targets::Cwd;
use crate::shell::safety::targets::{Protection, has_option, long_option, normalize, protection};
use crate::shell::safety::words::{UNKNOWN, Word};

/// Long options of the programs the floor reads flags of (GNU accepts unambiguous prefixes).
const RM_LONGS: &[&str] = &[
    "--force",
    "--interactive",
    "--one-file-system",
    "--no-preserve-root",
    "--preserve-root",
    "--recursive",
    "--dir",
    "--verbose",
    "--help",
    "--version",
];
const CHMOD_LONGS: &[&str] = &[
    "--changes",
    "--silent",
    "--quiet",
    "--verbose",
    "--no-preserve-root",
    "--preserve-root",
    "--reference",
    "--recursive",
    "--dereference",
    "--no-dereference",
    "--from",
    "--help",
    "--version",
];
const MV_LONGS: &[&str] = &[
    "--backup",
    "--force",
    "--interactive",
    "--no-clobber",
    "--no-copy",
    "--strip-trailing-slashes",
    "--suffix",
    "--target-directory",
    "--no-target-directory",
    "--update",
    "--verbose",
    "--context",
    "--exchange",
    "--debug",
    "--help",
    "--version",
];

/// Programs whose every argument must be known for the floor to be proven not to apply
/// (`rm` has its own rule: after `--` and without `-r`, an unknown word is one plain file).
const FLOOR_PROGRAMS: &[&str] = &["mv", "chmod", "chown", "chgrp", "shred", "dd", "kill"];

/// Programs that rewrite disks or partitions whatever their arguments.
const DISK_TOOLS: &[&str] = &[
    "wipefs",
    "blkdiscard",
    "mke2fs",
    "mkswap",
    "fdisk",
    "sfdisk",
    "parted",
    "gdisk",
    "sgdisk",
    "cfdisk",
    "mkdosfs",
    "mkntfs",
    "mkexfatfs",
    "mkexfat",
    "mformat",
    "sg_format",
    "lvremove",
    "vgremove",
    "pvremove",
];

/// Subcommands (or options) of disk tools that destroy what is on a disk.
const DISK_ACTIONS: &[(&str, &[&str])] = &[
    (
        "cryptsetup",
        &[
            "luksformat",
            "erase",
            "lukserase",
            "reencrypt",
            "lukskillslot",
            "luksremovekey",
            "format",
        ],
    ),
    ("zpool", &["destroy", "create", "labelclear"]),
    ("zfs", &["destroy"]),
    ("mdadm", &["--zero-superblock", "--create", "-c"]),
    ("badblocks", &["-w"]),
    (
        "hdparm",
        &[
            "--security-erase",
            "--security-erase-enhanced",
            "--trim-sector-ranges",
            "--write-sector",
        ],
    ),
    ("nvme", &["format", "sanitize"]),
    (
        "diskutil",
        &[
            "erasedisk",
            "erasevolume",
            "partitiondisk",
            "zerodisk",
            "securerase",
            "randomdisk",
            "reformat",
        ],
    ),
    ("dmsetup", &["remove_all", "wipe_table"]),
];

/// Verbs of systemd and logind that stop or suspend the machine.
const POWER_VERBS: &[&str] = &[
    "poweroff",
    "reboot",
    "halt",
    "kexec",
    "suspend",
    "hibernate",
    "hybrid-sleep",
    "suspend-then-hibernate",
    "soft-reboot",
    "rescue",
    "emergency",
];
/// Units that stop the machine when started or isolated.
const POWER_TARGETS: &[&str] = &[
    "poweroff",
    "reboot",
    "halt",
    "kexec",
    "rescue",
    "emergency",
    "shutdown",
    "suspend",
    "hibernate",
    "hybrid-sleep",
    "suspend-then-hibernate",
    "soft-reboot",
    "sleep",
];

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

/// Whether writing to `path` triggers a kernel action (`/proc/sysrq-trigger`).
pub(super) fn is_kernel_trigger(path: &str) -> bool {
    normalize(path, &Cwd::Session).is_some_and(|p| p == "/proc/sysrq-trigger")
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

/// Refuses, or marks unknown, for each target of a recursive operation.
fn check_targets<'a>(walker: &mut Walker, targets: impl IntoIterator<Item = &'a Word>, what: &str) {
    for target in targets {
        match protection(&target.text, &walker.cwd, walker.env) {
            Protection::Protected(dir) => {
                walker.refuse(format!(
                    "{what} `{}` ({dir}: the root, home or a system directory)",
                    target.shown()
                ));
                return;
            }
            Protection::Unevaluable => walker.mark_unknown(format!(
                "the target `{}` of {what} is only known at run time",
                target.shown()
            )),
            Protection::Safe => {}
        }
    }
}

/// Checks one program and its arguments against the floor.
pub(super) fn check(walker: &mut Walker, program: &str, args: &[Word]) {
    let texts: Vec<&str> = args.iter().map(|a| a.text.as_str()).collect();
    if FLOOR_PROGRAMS.contains(&program)
        && let Some(arg) = args.iter().find(|a| a.text.contains(UNKNOWN))
    {
        walker.mark_unknown(format!(
            "`{program}` is given `{}`, only known at run time",
            arg.shown()
        ));
    }
    match program {
        "rm" => {
            if has_option(&texts, None, "--no-preserve-root", RM_LONGS) {
                walker.refuse("rm --no-preserve-root");
            }
            let recursive = has_option(&texts, Some('r'), "--recursive", RM_LONGS)
                || has_option(&texts, Some('R'), "--recursive", RM_LONGS);
            // An unknown word before `--` may be `-r` itself.
            let maybe_recursive = texts
                .iter()
                .take_while(|t| **t != "--")
                .any(|t| t.contains(UNKNOWN));
            if recursive {
                check_targets(walker, operands(args), "recursive delete of");
            } else if maybe_recursive
                && let Some(arg) = args.iter().find(|a| a.text.contains(UNKNOWN))
            {
                walker.mark_unknown(format!(
                    "`rm` is given `{}`, only known at run time",
                    arg.shown()
                ));
            }
        }
        "mv" => check_move(walker, args),
        "chmod" | "chown" | "chgrp" => {
            if has_option(&texts, Some('R'), "--recursive", CHMOD_LONGS) {
                let by_reference = has_option(&texts, None, "--reference", CHMOD_LONGS);
                let targets = operands(args).into_iter().skip(usize::from(!by_reference));
                check_targets(walker, targets, &format!("recursive {program} of"));
            }
        }
        "dd" => {
            if let Some(target) = texts.iter().find_map(|t| t.strip_prefix("of="))
                && is_block_device(target)
            {
                walker.refuse(format!("dd onto the block device {target}"));
            }
        }
        "tee" | "cp" | "install" => {
            if let Some(device) = operands(args)
                .into_iter()
                .find(|w| is_block_device(&w.text) || is_kernel_trigger(&w.text))
            {
                walker.refuse(format!("{program} onto the device {}", device.text));
            }
        }
        "shred" if texts.iter().any(|t| is_block_device(t)) => {
            walker.refuse("shred destroys disk contents");
        }
        p if DISK_TOOLS.contains(&p) => {
            walker.refuse(format!("{program} rewrites disks or partitions"));
        }
        p if p == "mkfs" || p.starts_with("mkfs.") || p.starts_with("newfs") => {
            walker.refuse(format!("{p} formats a file system"));
        }
        p if let Some((_, actions)) = DISK_ACTIONS.iter().find(|(tool, _)| *tool == p) => {
            if let Some(action) = texts
                .iter()
                .find(|t| actions.contains(&t.to_ascii_lowercase().as_str()))
            {
                walker.refuse(format!("{program} {action} destroys what is on a disk"));
            }
        }
        _ => check_power(walker, program, &texts),
    }
}

/// `mv SOURCES… DEST`, `mv -t DEST SOURCES…`: moving a protected directory away.
fn check_move(walker: &mut Walker, args: &[Word]) {
    let mut with_target = false;
    let mut words: Vec<&Word> = Vec::new();
    let mut options_done = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let text = arg.text.as_str();
        if options_done || !text.starts_with('-') || text == "-" {
            words.push(arg);
            continue;
        }
        if text == "--" {
            options_done = true;
            continue;
        }
        let takes_value = match long_option(text, MV_LONGS) {
            Some(long) => {
                with_target |= long == "--target-directory";
                matches!(long, "--target-directory" | "--suffix") && !text.contains('=')
            }
            None if !text.starts_with("--") => {
                // A short cluster: `-t`/`-S` take the rest of the cluster, else the next word.
                let cluster = &text[1..];
                match cluster.find(['t', 'S']) {
                    Some(at) => {
                        with_target |= cluster.as_bytes()[at] == b't';
                        at + 1 == cluster.len()
                    }
                    None => false,
                }
            }
            None => false,
        };
        if takes_value {
            iter.next();
        }
    }
    let sources: Vec<&Word> = if with_target {
        words
    } else {
        words
            .split_last()
            .map(|(_, s)| s.to_vec())
            .unwrap_or_default()
    };
    check_targets(walker, sources, "moving away");
}

/// Stopping, rebooting or suspending the machine; signalling every process or init.
fn check_power(walker: &mut Walker, program: &str, texts: &[&str]) {
    match program {
        "shutdown" | "reboot" | "halt" | "poweroff" | "openrc-shutdown" | "rtcwake" => {
            walker.refuse(format!("{program} stops the machine"));
        }
        "init" | "telinit"
            if texts
                .first()
                .is_some_and(|t| matches!(*t, "0" | "6" | "1" | "S" | "s")) =>
        {
            walker.refuse(format!("{program} {} stops the machine", texts[0]));
        }
        "kexec" if texts.iter().any(|t| *t == "-e" || t.starts_with("--exec")) => {
            walker.refuse("kexec -e replaces the running kernel");
        }
        "systemctl" | "loginctl" => {
            let lower: Vec<String> = texts.iter().map(|t| t.to_ascii_lowercase()).collect();
            let verb = lower.iter().any(|t| POWER_VERBS.contains(&t.as_str()));
            let starts_target = lower.iter().any(|t| {
                matches!(
                    t.as_str(),
                    "start" | "isolate" | "restart" | "reload-or-restart" | "try-restart"
                )
            }) && lower.iter().any(|t| {
                let unit = t.strip_suffix(".target").unwrap_or(t);
                POWER_TARGETS.contains(&unit) && t.ends_with(".target")
            });
            if verb || starts_target {
                walker.refuse(format!("a {program} power action stops the machine"));
            }
        }
        "busctl" | "dbus-send" | "gdbus" | "qdbus"
            if texts.iter().any(|t| {
                let t = t.to_ascii_lowercase();
                [
                    "poweroff",
                    "reboot",
                    "halt",
                    "suspend",
                    "hibernate",
                    "kexec",
                ]
                .iter()
                .any(|action| t.ends_with(action))
            }) =>
        {
            walker.refuse(format!("a {program} call asks the machine to stop"));
        }
        "kill" | "pkill" | "killall" => check_kill(walker, program, texts),
        _ => {}
    }
}

/// `kill -9 -1`, `kill -- -1`, `kill -s KILL -1` (every process), `kill 1` (init).
fn check_kill(walker: &mut Walker, program: &str, texts: &[&str]) {
    if program != "kill" {
        if program == "killall" && texts.iter().any(|t| matches!(*t, "init" | "systemd")) {
            walker.refuse("killing init stops the machine");
        }
        return;
    }
    let mut index = 0;
    let mut signal_zero = false;
    if let Some(first) = texts.first() {
        if matches!(*first, "-s" | "-n" | "--signal") {
            signal_zero = texts.get(1).is_some_and(|s| *s == "0");
            index = 2;
        } else if *first == "--" {
            index = 1;
        } else if first.starts_with('-') && texts.len() > 1 {
            // The signal (`-9`, `-KILL`); a lone `kill -1` would be pid -1 too.
            signal_zero = *first == "-0";
            index = 1;
        }
    }
    let pids: Vec<&str> = texts
        .iter()
        .skip(index)
        .skip_while(|t| **t == "--")
        .copied()
        .collect();
    if pids.contains(&"-1") {
        walker.refuse("kill -1 signals every process");
    } else if pids.contains(&"1") && !signal_zero {
        walker.refuse("signalling init (pid 1) stops the machine");
    }
}
