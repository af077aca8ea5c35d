//! Programs that run another program given after their own options: how many words belong
//! to the wrapper, whether it moves the directory the inner program runs in, and whether it
//! changes who or what runs (so no "always allow" may cover the command).

use super::words::Word;

/// What a wrapper's words mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Wrapper {
    /// Words after the wrapper's name that belong to it.
    pub skip: usize,
    /// The directory the inner program runs in (`env -C`, `sudo -D`, `--chdir`).
    pub chdir: Option<Word>,
    /// Why an "always allow" cannot cover the command (`sudo` runs as someone else).
    pub unscoped: Option<&'static str>,
}

/// Long options that set the inner program's directory.
const CHDIR_OPTIONS: &[&str] = &["--chdir", "--wd", "--working-directory", "--directory"];

/// `(name, short options taking a value, long options taking a value, fixed arguments)`.
type Shape = (&'static str, &'static str, &'static [&'static str], usize);

const SHAPES: &[Shape] = &[
    (
        "sudo",
        "ugCDhpUrtR",
        &[
            "--user",
            "--group",
            "--chdir",
            "--host",
            "--prompt",
            "--other-user",
            "--role",
            "--type",
            "--chroot",
            "--close-from",
            "--command-timeout",
        ],
        0,
    ),
    ("doas", "uC", &[], 0),
    (
        "run0",
        "ugD",
        &[
            "--user",
            "--group",
            "--chdir",
            "--setenv",
            "--unit",
            "--property",
            "--description",
            "--slice",
            "--nice",
            "--machine",
        ],
        0,
    ),
    ("pkexec", "u", &["--user"], 0),
    ("nohup", "", &[], 0),
    ("exec", "a", &[], 0),
    ("builtin", "", &[], 0),
    ("setsid", "", &[], 0),
    ("time", "fo", &["--format", "--output"], 0),
    ("busybox", "", &[], 0),
    ("toybox", "", &[], 0),
    ("command", "", &[], 0),
    ("stdbuf", "ioe", &["--input", "--output", "--error"], 0),
    ("nice", "n", &["--adjustment"], 0),
    (
        "ionice",
        "cnpPu",
        &["--class", "--classdata", "--pid", "--pgid", "--uid"],
        0,
    ),
    ("timeout", "sk", &["--signal", "--kill-after"], 1),
    ("chroot", "", &["--userspec", "--groups"], 1),
    (
        "flock",
        "wEc",
        &["--timeout", "--conflict-exit-code", "--command"],
        1,
    ),
    (
        "xargs",
        "IinPLdEsa",
        &[
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-lines",
            "--arg-file",
            "--replace",
            "--eof",
            "--max-chars",
        ],
        0,
    ),
    ("taskset", "", &[], 1),
    (
        "chrt",
        "T",
        &["--sched-runtime", "--sched-period", "--sched-deadline"],
        1,
    ),
    ("prlimit", "", &[], 0),
    (
        "unshare",
        "SGwR",
        &[
            "--setuid",
            "--setgid",
            "--wd",
            "--root",
            "--propagation",
            "--map-user",
            "--map-group",
            "--map-users",
            "--map-groups",
        ],
        0,
    ),
    (
        "nsenter",
        "tSGwr",
        &["--target", "--setuid", "--setgid", "--wd", "--root"],
        0,
    ),
    (
        "setpriv",
        "",
        &[
            "--reuid",
            "--regid",
            "--groups",
            "--inh-caps",
            "--ambient-caps",
            "--bounding-set",
            "--securebits",
            "--pdeathsig",
            "--selinux-label",
            "--apparmor-profile",
            "--landlock-access",
            "--landlock-rule",
            "--ruid",
            "--euid",
            "--rgid",
            "--egid",
        ],
        0,
    ),
    (
        "systemd-run",
        "pEuM",
        &[
            "--property",
            "--setenv",
            "--unit",
            "--machine",
            "--working-directory",
            "--slice",
            "--uid",
            "--gid",
            "--nice",
            "--description",
            "--on-calendar",
            "--on-active",
            "--timer-property",
            "--path-property",
            "--socket-property",
        ],
        0,
    ),
    ("fakeroot", "lsib", &["--lib", "--faked", "--fd-base"], 0),
    ("faketime", "f", &[], 1),
    (
        "strace",
        "oepsuEabIOPSX",
        &[
            "--output",
            "--expr",
            "--attach",
            "--user",
            "--env",
            "--string-limit",
        ],
        0,
    ),
    ("ltrace", "oepsuaADFlnx", &["--output", "--library"], 0),
    ("valgrind", "", &[], 0),
    (
        "numactl",
        "CNmpiP",
        &[
            "--cpunodebind",
            "--membind",
            "--preferred",
            "--interleave",
            "--physcpubind",
        ],
        0,
    ),
    ("cpulimit", "lpe", &["--limit", "--pid", "--exe"], 0),
    ("trickle", "duwtln", &[], 0),
    ("torsocks", "upaP", &[], 0),
    ("proxychains", "f", &[], 0),
    ("proxychains4", "f", &[], 0),
    ("firejail", "", &[], 0),
    ("unbuffer", "", &[], 0),
    ("rlwrap", "abcfHlopPqsStw", &[], 0),
    ("catchsegv", "", &[], 0),
    ("sg", "", &[], 1),
    (
        "dbus-run-session",
        "",
        &["--config-file", "--dbus-daemon"],
        0,
    ),
    (
        "xvfb-run",
        "nsfep",
        &[
            "--server-args",
            "--server-num",
            "--auth-file",
            "--error-file",
            "--xauth-protocol",
        ],
        0,
    ),
    ("ssh-agent", "aEtP", &[], 0),
    ("caffeinate", "tw", &[], 0),
    ("chpst", "uUbnlmdofcpe/", &[], 0),
    ("env", "uCS", &["--unset", "--chdir", "--split-string"], 0),
];

/// Wrappers that run the inner program as another user.
const AS_SOMEONE_ELSE: &[&str] = &["sudo", "doas", "run0", "pkexec", "sg", "chpst", "setpriv"];

/// Wrappers with a mode in which they run no program (`taskset -p PID`).
fn pid_mode(program: &str, args: &[Word]) -> bool {
    matches!(
        program,
        "taskset" | "chrt" | "prlimit" | "cpulimit" | "strace" | "ltrace"
    ) && args.iter().any(|a| {
        matches!(
            a.text.as_str(),
            "-p" | "--pid" | "-a" | "--all-tasks" | "--attach"
        ) || a.text.starts_with("--pid=")
    })
}

fn is_assignment(text: &str) -> bool {
    super::tables::is_assignment(text)
}

/// The wrapper `program` is, with the words of it in `args`; `None` when it is not one.
pub(super) fn wrapper(program: &str, args: &[Word]) -> Option<Wrapper> {
    let (_, short_values, long_values, fixed) = SHAPES.iter().find(|s| s.0 == program)?;
    if pid_mode(program, args) {
        return None;
    }
    let mut chdir = None;
    let mut n = 0;
    while n < args.len() {
        let text = args[n].text.as_str();
        if text == "--" {
            n += 1;
            break;
        }
        if program == "env" && is_assignment(text) {
            n += 1;
            continue;
        }
        if !text.starts_with('-') || text == "-" {
            break;
        }
        let (name, inline) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (text, None),
        };
        let long = name
            .starts_with("--")
            .then(|| super::targets::long_option(name, long_values))
            .flatten();
        let takes_value = if name.starts_with("--") {
            long.is_some()
        } else {
            // A short cluster: the value is the rest of the cluster, else the next word.
            let cluster = &name[1..];
            cluster
                .char_indices()
                .find(|(_, c)| short_values.contains(*c))
                .is_some_and(|(at, c)| at + c.len_utf8() == cluster.len())
        };
        let value_word = if takes_value && inline.is_none() {
            n += 1;
            args.get(n).cloned()
        } else {
            inline.map(|v| Word {
                text: v.to_string(),
                ..args[n].clone()
            })
        };
        let is_chdir = match long {
            Some(long) => CHDIR_OPTIONS.contains(&long),
            None => matches!(
                (program, name),
                ("env", "-C") | ("sudo" | "run0", "-D") | ("unshare" | "nsenter", "-w")
            ),
        };
        if is_chdir {
            chdir = value_word;
        }
        n += 1;
    }
    let skip = (n + fixed).min(args.len());
    Some(Wrapper {
        skip,
        chdir,
        unscoped: AS_SOMEONE_ELSE
            .contains(&program)
            .then_some("it runs a program as another user"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(texts: &[&str]) -> Vec<Word> {
        texts.iter().map(|t| Word::literal(*t)).collect()
    }

    fn skip(program: &str, texts: &[&str]) -> Option<usize> {
        wrapper(program, &words(texts)).map(|w| w.skip)
    }

    #[test]
    fn wrapper_words_are_counted() {
        assert_eq!(skip("stdbuf", &["-o", "L", "rm"]), Some(2));
        assert_eq!(skip("stdbuf", &["-oL", "rm"]), Some(1));
        assert_eq!(skip("taskset", &["0x1", "rm"]), Some(1));
        assert_eq!(skip("taskset", &["-c", "0", "rm"]), Some(2));
        assert_eq!(skip("taskset", &["-p", "42"]), None);
        assert_eq!(skip("sudo", &["-u", "root", "-H", "rm"]), Some(3));
        assert_eq!(skip("timeout", &["-s", "KILL", "5", "rm"]), Some(3));
        assert_eq!(skip("env", &["-i", "A=1", "-u", "B", "rm"]), Some(4));
        assert_eq!(skip("chrt", &["-f", "10", "rm"]), Some(2));
        assert_eq!(skip("faketime", &["2020-01-01", "rm"]), Some(1));
        assert_eq!(skip("ls", &["-la"]), None);
    }

    #[test]
    fn directory_options_are_found() {
        let chdir = |program: &str, texts: &[&str]| {
            wrapper(program, &words(texts))
                .and_then(|w| w.chdir)
                .map(|w| w.text)
        };
        assert_eq!(chdir("env", &["-C", "/srv", "rm"]).as_deref(), Some("/srv"));
        assert_eq!(
            chdir("env", &["--chdir=/srv", "rm"]).as_deref(),
            Some("/srv")
        );
        assert_eq!(
            chdir("env", &["--chd", "/srv", "rm"]).as_deref(),
            Some("/srv")
        );
        assert_eq!(chdir("sudo", &["-D", "/", "rm"]).as_deref(), Some("/"));
        assert_eq!(chdir("sudo", &["--chdir", "/", "rm"]).as_deref(), Some("/"));
        assert_eq!(chdir("unshare", &["--wd", "/", "rm"]).as_deref(), Some("/"));
        assert_eq!(
            chdir("systemd-run", &["--working-directory=/", "rm"]).as_deref(),
            Some("/")
        );
        assert!(wrapper("sudo", &words(&["rm"])).is_some_and(|w| w.unscoped.is_some()));
    }
}
