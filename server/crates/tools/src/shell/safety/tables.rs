//! What the walker knows of programs by name: those that only read, those that name other
//! programs, shells and interpreters, multiplexers, git's safe keys; and the small rules for
//! reading their arguments (options, assignments, script flags).

use super::words::Word;

/// Programs that only read (with the arguments `reads_only` checks): a command made of them
/// alone, with no output redirected into a file, is harmless without a sandbox.
pub(super) const READ_ONLY: &[&str] = &[
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "find",
    "pwd",
    "echo",
    "printf",
    "which",
    "type",
    "file",
    "stat",
    "du",
    "df",
    "tree",
    "sort",
    "uniq",
    "cut",
    "tr",
    "diff",
    "cmp",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "date",
    "id",
    "whoami",
    "uname",
    "hostname",
    "true",
    "false",
    "test",
    "[",
    "nl",
    "column",
    "od",
    "hexdump",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "seq",
    "sleep",
    "printenv",
    "jq",
    "ps",
    "cd",
    "less",
    "more",
    "env",
];
/// Subcommands of `git` that only read.
pub(super) const GIT_READ_ONLY: &[&str] = &[
    "git status",
    "git log",
    "git diff",
    "git show",
    "git rev-parse",
    "git ls-files",
    "git blame",
    "git describe",
    "git shortlog",
    "git grep",
    "git cat-file",
    "git ls-tree",
];

/// Whether `program` with `args` only reads.
pub(super) fn reads_only(scope: &str, program: &str, args: &[Word]) -> bool {
    let has = |flags: &[&str]| args.iter().any(|a| flags.contains(&a.text.as_str()));
    match program {
        "git" => GIT_READ_ONLY.contains(&scope),
        "find" => !args.iter().any(|a| {
            a.text.starts_with("-exec")
                || a.text.starts_with("-ok")
                || a.text.starts_with("-fprint")
                || matches!(a.text.as_str(), "-delete" | "-fls")
        }),
        "sort" => !has(&["-o"]) && !args.iter().any(|a| a.text.starts_with("--output")),
        "env" => args.iter().all(|a| a.text.starts_with('-')),
        p => READ_ONLY.contains(&p),
    }
}

/// Programs that name other programs as data (`which rm`, `man mkfs`): their arguments are
/// never scanned for floor commands.
pub(super) const NAMES_PROGRAMS: &[&str] = &[
    "echo",
    "printf",
    "which",
    "type",
    "whereis",
    "man",
    "info",
    "help",
    "whatis",
    "apropos",
    "dpkg",
    "apt",
    "apt-get",
    "apt-cache",
    "brew",
    "pacman",
    "dnf",
    "yum",
    "rpm",
    "snap",
    "pkill",
    "pgrep",
    "killall",
    "pidof",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "ack",
    "locate",
    "find",
    "printenv",
    "ls",
    "file",
    "stat",
    "cat",
    "less",
    "more",
    "head",
    "tail",
    "strings",
    "git",
    "jq",
    "sed",
    "awk",
    "tldr",
    "ps",
    "cd",
    "test",
    "[",
    "command",
    "hash",
    "alias",
    "complete",
    "compgen",
    "declare",
    "typeset",
    "export",
    "local",
    "readonly",
    "unset",
    "read",
];

/// Programs the floor has rules for; after an unknown wrapper their words are checked too.
pub(super) const FLOOR_NAMES: &[&str] = &[
    "rm",
    "mv",
    "chmod",
    "chown",
    "chgrp",
    "dd",
    "shred",
    "kill",
    "shutdown",
    "reboot",
    "halt",
    "poweroff",
    "systemctl",
    "loginctl",
    "init",
    "telinit",
    "wipefs",
    "blkdiscard",
    "fdisk",
    "sfdisk",
    "parted",
    "gdisk",
    "sgdisk",
    "cfdisk",
    "mkswap",
    "mke2fs",
    "mkdosfs",
    "cryptsetup",
    "zpool",
    "mdadm",
    "find",
    "tee",
    "cp",
];

/// Device paths through which a program reads its own standard input.
pub(super) fn is_stdin_path(text: &str) -> bool {
    matches!(text, "/dev/stdin" | "-")
        || text.starts_with("/dev/fd/")
        || text.starts_with("/proc/self/fd/")
        || text.starts_with("/proc/thread-self/fd/")
}

/// `git -c KEY=VALUE` keys that never run a program.
pub(super) const SAFE_GIT_KEYS: &[&str] = &[
    "user.name",
    "user.email",
    "color.",
    "core.quotepath",
    "core.autocrlf",
    "core.safecrlf",
    "init.defaultbranch",
    "advice.",
    "commit.gpgsign",
    "tag.gpgsign",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "log.",
    "status.",
    "safe.directory",
    "protocol.version",
    "fetch.prune",
    "merge.ff",
    "diff.renames",
    "diff.noprefix",
    "column.ui",
    "i18n.",
];

pub(super) const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh"];
pub(super) const INTERPRETERS: &[&str] = &[
    "python", "python2", "python3", "perl", "ruby", "node", "php", "lua", "deno", "bun",
];
/// Programs whose first non-option argument is a subcommand worth scoping by.
pub(super) const MULTIPLEXERS: &[&str] = &[
    "git",
    "cargo",
    "npm",
    "pnpm",
    "yarn",
    "bun",
    "deno",
    "docker",
    "podman",
    "kubectl",
    "go",
    "pip",
    "pip3",
    "uv",
    "poetry",
    "apt",
    "apt-get",
    "brew",
    "make",
    "systemctl",
    "gh",
    "rustup",
    "bundle",
    "rake",
    "mvn",
    "gradle",
    "dotnet",
    "terraform",
    "helm",
    "conda",
    "composer",
];
/// Commands nested deeper than this inside wrappers are not analysed.
pub(super) const MAX_WRAPPERS: usize = 32;

pub(super) fn is_interpreter(program: &str) -> bool {
    INTERPRETERS.contains(&program)
        || program
            .strip_prefix("python")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

pub(super) fn is_assignment(text: &str) -> bool {
    match text.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Counts the option words (and the values of `with_value` options) at the start of `args`.
pub(super) fn skip_options(args: &[Word], with_value: &[&str]) -> usize {
    let mut n = 0;
    while n < args.len() {
        let text = args[n].text.as_str();
        if text == "--" {
            return n + 1;
        }
        if !text.starts_with('-') || text == "-" {
            break;
        }
        n += if with_value.contains(&text) { 2 } else { 1 };
    }
    n.min(args.len())
}

/// The value of `flag` among `args` (`-c 'script'`), for programs taking a script string.
pub(super) fn script_flag(args: &[Word], short: char) -> Option<&Word> {
    let position = args.iter().position(|w| {
        let t = w.text.as_str();
        t.starts_with('-') && !t.starts_with("--") && t[1..].contains(short)
    })?;
    args[position + 1..]
        .iter()
        .find(|w| !w.text.starts_with('-') || w.text == "-")
}
