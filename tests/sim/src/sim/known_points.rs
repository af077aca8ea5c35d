//! The failpoints a simulation may crash or fault at: every point the sources name (listed
//! by this crate's build script from the server's and clients' Rust files, so a point added
//! anywhere is in the next build's simulations), sorted (a seed's choice is the same on
//! every machine), less the areas a `talaria acp` agent never passes.

include!(concat!(env!("OUT_DIR"), "/source_points.rs"));

/// Areas a simulation's agent (`talaria acp`) never passes: `talaria batch`'s outputs, the
/// trajectory tap, a damaged store's salvage, `talaria serve`, the setup's config rewrites.
const NOT_IN_ACP: [&str; 5] = ["batch", "trajectory", "salvage", "serve", "config"];

/// The points a simulation chooses from.
pub fn known_points() -> Vec<&'static str> {
    SOURCE_POINTS
        .iter()
        .copied()
        .filter(|p| {
            !NOT_IN_ACP
                .iter()
                .any(|area| p.starts_with(&format!("{area}::")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sources_points_are_listed_sorted_without_the_other_binaries() {
        let points = known_points();
        assert!(points.contains(&"journal::commit::before"), "{points:?}");
        assert!(
            points.iter().all(|p| !p.starts_with("batch::")),
            "{points:?}"
        );
        let mut sorted = points.clone();
        sorted.sort();
        assert_eq!(points, sorted);
    }
}
