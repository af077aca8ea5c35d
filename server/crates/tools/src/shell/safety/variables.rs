//! Code that only exists at run time: variables a shell runs as code (`PS4`, `BASH_ENV`, …),
//! arithmetic that evaluates a variable holding code (`x='a[$(…)]'; : $((x))`), builtins that
//! define or replace commands (`alias`, `hash -p`, `enable`, `mapfile -C`); the variables a
//! builtin assigns (`read`, `mapfile`, `printf -v`, …), whose values are unknown; and the
//! variables whose change makes an "always allow" cover a different program (`PATH`, `LD_*`,
//! `GIT_*`, …).

use super::words::Word;

/// Variables whose value a shell runs (or that load code into it).
pub(super) const CODE_VARIABLES: &[&str] = &[
    "PS0",
    "PS1",
    "PS2",
    "PS3",
    "PS4",
    "PROMPT_COMMAND",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "BASH_CMDS",
    "BASH_ALIASES",
    "BASH_LOADABLES_PATH",
];

/// Whether assigning `name` makes a shell run code from it.
pub(super) fn runs_code(name: &str) -> bool {
    CODE_VARIABLES.contains(&name) || name.starts_with("BASH_FUNC_")
}

/// Variables that choose which program runs, or load code or configuration into programs.
pub(super) const PROGRAM_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "ZDOTDIR",
    "INPUTRC",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "PAGER",
    "MANPAGER",
    "EDITOR",
    "VISUAL",
    "LESSOPEN",
    "LESSCLOSE",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "RUSTC_WRAPPER",
    "RUSTC",
    "RUSTFLAGS",
    "CC",
    "CXX",
    "LD",
    "MAKEFLAGS",
    "MAKE",
    "BROWSER",
    "SHELL",
    "GCONV_PATH",
    "LOCPATH",
    "TERMINFO",
    "GEM_HOME",
    "GEM_PATH",
    "GOFLAGS",
];
pub(super) const PROGRAM_VARIABLE_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "GIT_",
    "CARGO_",
    "NPM_CONFIG_",
    "npm_config_",
    "PIP_",
    "MAVEN_",
    "GRADLE_",
];

/// Whether assigning `name` changes which program runs or how programs are configured.
pub(super) fn changes_programs(name: &str) -> bool {
    PROGRAM_VARIABLES.contains(&name)
        || PROGRAM_VARIABLE_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

pub(super) fn has_short(texts: &[&str], flag: char) -> bool {
    texts
        .iter()
        .take_while(|t| **t != "--")
        .any(|t| t.starts_with('-') && !t.starts_with("--") && t[1..].contains(flag))
}

/// Why a builtin makes the rest of the command only known at run time, if it does.
pub(super) fn hides_code(program: &str, texts: &[&str]) -> Option<String> {
    let why = match program {
        "alias" if texts.iter().any(|t| t.contains('=')) => "`alias` defines a command",
        "hash" if has_short(texts, 'p') => "`hash -p` replaces the program a name runs",
        "enable" if !texts.is_empty() => "`enable` loads or replaces shell builtins",
        "mapfile" | "readarray" if has_short(texts, 'C') => "`mapfile -C` runs a callback",
        "bind" if has_short(texts, 'x') => "`bind -x` runs a command",
        "complete" | "compgen" if has_short(texts, 'C') || has_short(texts, 'F') => {
            "`complete -C`/`-F` runs a command"
        }
        "fc" => "`fc` runs commands from the history",
        "shopt" if texts.contains(&"expand_aliases") => "aliases are expanded",
        _ => return None,
    };
    Some(why.to_string())
}

/// Skips a builtin's options (and the values of those in `with_value`); the rest.
pub(super) fn after_options<'w>(args: &'w [Word], with_value: &str) -> Vec<&'w Word> {
    let mut rest = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let t = arg.text.as_str();
        if t == "--" {
            rest.extend(iter.by_ref());
            break;
        }
        if t.starts_with('-') && t.len() > 1 {
            if t.chars().last().is_some_and(|c| with_value.contains(c)) {
                iter.next();
            }
            continue;
        }
        rest.push(arg);
    }
    rest
}

/// The variables a builtin assigns (with values only known at run time).
pub(super) fn assigned_by(program: &str, args: &[Word]) -> Vec<String> {
    let names: Vec<String> = match program {
        "read" => {
            let mut names: Vec<String> = after_options(args, "adnNptu")
                .iter()
                .map(|w| w.text.clone())
                .collect();
            if let Some(at) = args.iter().position(|a| a.text == "-a")
                && let Some(array) = args.get(at + 1)
            {
                names.push(array.text.clone());
            }
            names.push("REPLY".into());
            names
        }
        "mapfile" | "readarray" => {
            let rest = after_options(args, "dnOsuCc");
            vec![rest.last().map_or("MAPFILE".into(), |w| w.text.clone())]
        }
        "printf" => args
            .iter()
            .position(|a| a.text == "-v")
            .and_then(|at| args.get(at + 1))
            .map(|w| vec![w.text.clone()])
            .unwrap_or_default(),
        "getopts" => args
            .get(1)
            .map(|w| vec![w.text.clone()])
            .unwrap_or_default(),
        "let" => args
            .iter()
            .filter_map(|w| {
                let name: String = w
                    .text
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                (!name.is_empty()).then_some(name)
            })
            .collect(),
        _ => Vec::new(),
    };
    names
        .into_iter()
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

/// The names an arithmetic expression's text refers to.
pub(super) fn identifiers(expression: &str) -> Vec<&str> {
    expression
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_that_assign_name_their_variables() {
        let words =
            |texts: &[&str]| -> Vec<Word> { texts.iter().map(|t| Word::literal(*t)).collect() };
        assert_eq!(assigned_by("read", &words(&["-r", "d"])), ["d", "REPLY"]);
        assert_eq!(
            assigned_by("read", &words(&["-p", "x:", "a", "b"])),
            ["a", "b", "REPLY"]
        );
        assert_eq!(assigned_by("mapfile", &words(&["-t", "lines"])), ["lines"]);
        assert_eq!(
            assigned_by("printf", &words(&["-v", "v", "%s", "x"])),
            ["v"]
        );
        assert_eq!(assigned_by("let", &words(&["x=1+2", "y++"])), ["x", "y"]);
        assert!(hides_code("mapfile", &["-C", "cb", "-c", "1", "x"]).is_some());
        assert!(hides_code("alias", &["ls=rm -rf"]).is_some());
        assert!(hides_code("alias", &[]).is_none());
    }
}
