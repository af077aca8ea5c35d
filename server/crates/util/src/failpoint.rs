//! Named points at every durable step (docs/durability.md lists them per operation), for the
//! crash suite: in a build with the `failpoints` feature (tests only; a release build
//! compiles every call here to nothing) a test can list the points an operation passes, kill
//! the process at one exactly as `kill -9` would, or set the `fail` crate's actions there.
//!
//! - `TALARIA_FAILPOINT_TRACE=FILE`: each point passed appends its name to FILE as a line.
//! - `TALARIA_CRASH_AT=NAME` or `NAME#N`: the process sends itself SIGKILL at the point's
//!   first (or N-th) pass, after tracing it: nothing after the point runs, nothing is flushed.
//! - `FAILPOINTS=NAME=ACTIONS;…`: the `fail` crate's actions at a point (`sleep(ms)`, `pause`,
//!   `panic`, `return`; read by [`setup`]); `return` makes [`injected`] answer `true`, so the
//!   step fails there as a full disk or a refusing store would.
//!
//! Names are `area::step::when` (`journal::commit::after`, `rewind::file::before`): the
//! area is the operation's owner, the step what changes there, and `before`/`after` which
//! side of the change the point stands on.

/// A durable step is passed: traced, and a crash or the `fail` crate's action there.
#[inline(always)]
pub fn step(name: &'static str) {
    #[cfg(feature = "failpoints")]
    active::pass(name);
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// As [`step`]; `true` when the point is set to `return`: the caller then fails the step
/// as the real failure would (a full disk, a store that refuses).
#[inline(always)]
pub fn injected(name: &'static str) -> bool {
    #[cfg(feature = "failpoints")]
    return active::pass(name);
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        false
    }
}

/// Reads `FAILPOINTS` once at the process's start (nothing without the feature).
pub fn setup() {
    #[cfg(feature = "failpoints")]
    active::configure_from_env();
}

/// Whether this build has failpoints.
pub const ENABLED: bool = cfg!(feature = "failpoints");

#[cfg(feature = "failpoints")]
mod active {
    use std::collections::HashMap;
    use std::io::Write;
    use std::sync::{Mutex, OnceLock};

    /// What the environment asked of this process.
    struct Plan {
        trace: Option<std::path::PathBuf>,
        crash: Option<(String, u64)>,
    }

    fn plan() -> &'static Plan {
        static PLAN: OnceLock<Plan> = OnceLock::new();
        PLAN.get_or_init(|| Plan {
            trace: std::env::var_os("TALARIA_FAILPOINT_TRACE").map(Into::into),
            crash: std::env::var("TALARIA_CRASH_AT")
                .ok()
                .map(|at| match at.split_once('#') {
                    Some((name, nth)) => (name.to_string(), nth.parse().unwrap_or(1)),
                    None => (at, 1),
                }),
        })
    }

    /// Passes per point name, for `NAME#N`.
    fn passes() -> &'static Mutex<HashMap<&'static str, u64>> {
        static PASSES: OnceLock<Mutex<HashMap<&'static str, u64>>> = OnceLock::new();
        PASSES.get_or_init(Default::default)
    }

    /// Counts, traces and crashes under one lock: a point another thread passes at the same
    /// moment is traced wholly before or not at all, so a crash's point is the trace's last.
    pub(super) fn pass(name: &'static str) -> bool {
        let plan = plan();
        let mut passes = crate::lock(passes());
        let nth = {
            let count = passes.entry(name).or_insert(0);
            *count += 1;
            *count
        };
        if let Some(path) = &plan.trace {
            let line = format!("{name}\n");
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut file| file.write_all(line.as_bytes()));
        }
        if plan
            .crash
            .as_ref()
            .is_some_and(|(at, when)| at == name && *when == nth)
        {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        drop(passes);
        fail::eval(name, |_| ()).is_some()
    }

    pub(super) fn configure_from_env() {
        let Ok(points) = std::env::var("FAILPOINTS") else {
            return;
        };
        for point in points.split(';').filter(|p| !p.trim().is_empty()) {
            let Some((name, actions)) = point.split_once('=') else {
                continue;
            };
            if let Err(error) = fail::cfg(name.trim(), actions.trim()) {
                eprintln!("FAILPOINTS: {name}: {error}");
            }
        }
    }
}

#[cfg(all(test, feature = "failpoints"))]
mod tests {
    use super::*;

    #[test]
    fn a_point_set_to_return_is_injected_and_others_pass() {
        fail::cfg("util::test::return", "return").expect("configures");
        assert!(injected("util::test::return"));
        assert!(!injected("util::test::unset"));
        fail::cfg("util::test::return", "off").expect("configures");
        assert!(!injected("util::test::return"));
    }

    /// In a child process (this test binary again): threads pass `util::test::busy` without
    /// pause while one passes `util::test::crash`, where the process kills itself.
    fn crash_among_busy_threads() {
        for _ in 0..4 {
            std::thread::spawn(|| {
                loop {
                    step("util::test::busy");
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        step("util::test::crash");
        unreachable!("the process is killed at the point");
    }

    #[test]
    fn a_crash_is_the_last_point_traced_whatever_other_threads_pass() {
        if std::env::var_os("TALARIA_FAILPOINT_TEST_CHILD").is_some() {
            crash_among_busy_threads();
            // A child that was not killed (a mutant) must not start children of its own.
            return;
        }
        for run in 0..20 {
            let trace = tempfile::NamedTempFile::new().expect("a trace file");
            let status = std::process::Command::new(std::env::current_exe().expect("this test"))
                .args(["--exact", "failpoint::tests::a_crash_is_the_last_point_traced_whatever_other_threads_pass"])
                .env("TALARIA_FAILPOINT_TEST_CHILD", "1")
                .env("TALARIA_FAILPOINT_TRACE", trace.path())
                .env("TALARIA_CRASH_AT", "util::test::crash")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .expect("the child runs");
            assert!(!status.success(), "run {run}: the child was killed");
            let traced = std::fs::read_to_string(trace.path()).expect("the trace");
            assert_eq!(
                traced.lines().last(),
                Some("util::test::crash"),
                "run {run}: the last point traced is where the process was killed"
            );
        }
    }
}
