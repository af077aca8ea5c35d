//! Property tests give the same result on every run of the README's test command: it runs
//! them from one fixed seed (`PROPTEST_RNG_SEED`, which proptest reads into
//! `ProptestConfig::default()`), every property test's configuration builds on that default
//! (no seed or failure file of its own), and the failure files proptest keeps
//! (`proptest-regressions/`, replayed before the drawn cases) are committed, not ignored.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Every Rust file of the workspace (build output and installed packages left out).
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | "node_modules" | ".git") {
                rust_files(&path, found);
            }
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
}

#[test]
fn the_readme_test_command_runs_property_tests_from_a_fixed_seed() {
    let script = std::fs::read_to_string(workspace().join("tests/run-all.sh")).expect("run-all");
    let export = script
        .lines()
        .position(|line| line.trim_start().starts_with("export PROPTEST_RNG_SEED="))
        .expect("run-all.sh exports PROPTEST_RNG_SEED");
    let first_test = script
        .lines()
        .position(|line| line.contains("cargo test"))
        .expect("run-all.sh runs cargo test");
    assert!(
        export < first_test,
        "the seed is set before the first cargo test"
    );
    let value = script.lines().nth(export).unwrap_or_default();
    let digits: String = value
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    assert!(
        digits.parse::<u64>().is_ok(),
        "a fixed numeric seed: {value}"
    );
}

#[test]
fn every_property_test_builds_on_the_default_configuration() {
    let mut files = Vec::new();
    rust_files(&workspace(), &mut files);
    let this_file = Path::new(file!()).file_name().unwrap_or_default();
    let mut with_properties = 0;
    for path in files {
        if path.file_name() == Some(this_file) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if !text.contains("proptest!") {
            continue;
        }
        with_properties += 1;
        let shown = path.display();
        for own in [
            "rng_seed",
            "failure_persistence",
            "TestRunner::new",
            "RngSeed",
        ] {
            assert!(
                !text.contains(own),
                "{shown}: `{own}` would step around the seed the README's command sets"
            );
        }
        for (at, _) in text.match_indices("proptest_config(") {
            let config = &text[at..text[at..].find(")]").map_or(text.len(), |end| at + end)];
            assert!(
                config.contains("ProptestConfig::default()"),
                "{shown}: a configuration that does not build on the default: {config}"
            );
        }
    }
    assert!(
        with_properties >= 8,
        "found the property tests: {with_properties}"
    );
}

#[test]
fn failure_files_are_committed_not_ignored() {
    let ignored = std::fs::read_to_string(workspace().join(".gitignore")).unwrap_or_default();
    assert!(
        !ignored.contains("proptest-regressions"),
        ".gitignore keeps proptest's failure files out: {ignored}"
    );
    let kept = workspace().join("server/crates/tools/proptest-regressions/shell/safety/tests.txt");
    let text = std::fs::read_to_string(&kept).expect("the classifier's failure file");
    assert!(
        text.lines().any(|line| line.starts_with("cc ")),
        "{}",
        kept.display()
    );
}
