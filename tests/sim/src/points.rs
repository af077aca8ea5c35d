//! Failpoint passes as a trace lists them (`TALARIA_FAILPOINT_TRACE`: one point name a line,
//! in the order the process passed them), numbered per name as `TALARIA_CRASH_AT=NAME#N`
//! counts them.

use std::collections::HashMap;
use std::path::Path;

/// The `nth` pass (from 1, counted from the process's start) of point `name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pass {
    pub name: String,
    pub nth: u64,
}

impl std::fmt::Display for Pass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.name, self.nth)
    }
}

/// The point names a trace holds, in order (an absent trace holds none).
pub fn read_trace(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|text| {
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Each line of `trace` numbered as the pass it is.
pub fn numbered(trace: &[String]) -> Vec<Pass> {
    let mut counts: HashMap<&str, u64> = HashMap::new();
    trace
        .iter()
        .map(|name| {
            let nth = counts.entry(name.as_str()).or_insert(0);
            *nth += 1;
            Pass {
                name: name.clone(),
                nth: *nth,
            }
        })
        .collect()
}

/// The passes from line `from` on (what an operation passed after the trace had `from` lines).
pub fn passes_from(trace: &[String], from: usize) -> Vec<Pass> {
    numbered(trace).into_iter().skip(from).collect()
}

/// The distinct point names of these passes, in first-pass order.
pub fn names(passes: &[Pass]) -> Vec<String> {
    let mut seen = Vec::new();
    for pass in passes {
        if !seen.contains(&pass.name) {
            seen.push(pass.name.clone());
        }
    }
    seen
}

/// Which passes a crash suite runs: every pass of a point passed at most `all_up_to` times;
/// of a point passed more often, its first, middle and last (the passes between are the
/// same step again on other entries; `all_up_to = u64::MAX` runs every one).
pub fn chosen(passes: &[Pass], all_up_to: u64) -> Vec<Pass> {
    let mut by_name: Vec<(String, Vec<Pass>)> = Vec::new();
    for pass in passes {
        match by_name.iter_mut().find(|(name, _)| *name == pass.name) {
            Some((_, list)) => list.push(pass.clone()),
            None => by_name.push((pass.name.clone(), vec![pass.clone()])),
        }
    }
    let mut picked = Vec::new();
    for (_, list) in by_name {
        if list.len() as u64 <= all_up_to {
            picked.extend(list);
            continue;
        }
        let mut indexes = vec![0, list.len() / 2, list.len() - 1];
        indexes.dedup();
        picked.extend(indexes.into_iter().map(|i| list[i].clone()));
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn passes_are_numbered_per_name_from_the_process_start() {
        let t = trace(&["a", "b", "a", "c", "a"]);
        let after = passes_from(&t, 2);
        assert_eq!(
            after.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["a#2", "c#1", "a#3"]
        );
        assert_eq!(names(&after), ["a", "c"]);
    }

    #[test]
    fn a_point_passed_often_is_sampled_and_every_other_pass_kept() {
        let t = trace(&["x", "y", "x", "x", "x", "x", "x", "y"]);
        let picked: Vec<String> = chosen(&numbered(&t), 2)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(picked, ["x#1", "x#4", "x#6", "y#1", "y#2"]);
        assert_eq!(chosen(&numbered(&t), u64::MAX).len(), t.len());
    }
}
