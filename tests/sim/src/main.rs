//! `talaria-sim`: runs the seeded simulation (placeholder until the driver lands).

fn main() {}
