//! The failpoints a simulation may crash or fault at: every point ARCHITECTURE.md's table
//! "Failpoints per operation" names (read at build time, so a point documented later is in
//! the next build's simulations), in the order the table names them (a seed's choice is
//! the same on every machine).

/// The architecture document this build was made with.
const ARCHITECTURE: &str = include_str!("../../../../ARCHITECTURE.md");

/// Areas a simulation's agent (`talaria acp`) never passes: `talaria batch`'s outputs, the
/// trajectory tap, a damaged store's salvage, `talaria serve`, the setup's config rewrites.
const NOT_IN_ACP: [&str; 5] = ["batch", "trajectory", "salvage", "serve", "config"];

/// The point names of the failpoint table, each `area::step::before` or `::after`, less the
/// areas an ACP agent never passes.
pub fn known_points() -> Vec<String> {
    points_in(ARCHITECTURE)
        .into_iter()
        .filter(|p| {
            !NOT_IN_ACP
                .iter()
                .any(|area| p.starts_with(&format!("{area}::")))
        })
        .collect()
}

/// The point names written in `text` as `` `area::step::before/after` ``, `` `area::step::*` ``,
/// `` `area::step::before` `` (followed perhaps by `` `::after` ``, the same step's).
pub fn points_in(text: &str) -> Vec<String> {
    let mut points: Vec<String> = Vec::new();
    let mut last_step: Option<String> = None;
    for (i, quoted) in text.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let (step, tail) = match quoted.strip_prefix("::") {
            Some(tail) => match &last_step {
                Some(step) => (step.clone(), tail.to_string()),
                None => continue,
            },
            None => match quoted.rsplit_once("::") {
                Some((step, tail)) if step.split("::").count() == 2 && is_name(step) => {
                    (step.to_string(), tail.to_string())
                }
                _ => continue,
            },
        };
        let whens: &[&str] = match tail.as_str() {
            "before" => &["before"],
            "after" => &["after"],
            "before/after" | "*" => &["before", "after"],
            _ => continue,
        };
        for when in whens {
            let name = format!("{step}::{when}");
            if !points.contains(&name) {
                points.push(name);
            }
        }
        last_step = Some(step);
    }
    points
}

fn is_name(step: &str) -> bool {
    step.split("::")
        .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_spellings_all_read_as_points() {
        let text = "| x | `journal::append::before/after`, `journal::commit::before` (*r*) / \
                    `::after`, `claim::take::*`, `talaria_util::failpoint`, `::nothing` |";
        assert_eq!(
            points_in(text),
            [
                "journal::append::before",
                "journal::append::after",
                "journal::commit::before",
                "journal::commit::after",
                "claim::take::before",
                "claim::take::after",
            ]
        );
        assert!(known_points().len() >= 20, "{:?}", known_points());
    }
}
