//! `config.toml` edits on five files as users write them (comments, inline tables, an
//! `api_key` under another table, multi-line arrays, a multi-line string holding a line that
//! reads `api_key = …`), their bytes compared with what is expected; the rewrite private and
//! atomic.

use std::path::Path;

use super::*;

/// (name, the file, the file after logout, the file after setup chose the local server).
const FILES: &[(&str, &str, &str, &str)] = &[
    (
        "commented",
        include_str!("fixtures/commented.toml"),
        include_str!("fixtures/commented.logout.toml"),
        include_str!("fixtures/commented.setup.toml"),
    ),
    (
        "inline-tables",
        include_str!("fixtures/inline-tables.toml"),
        include_str!("fixtures/inline-tables.logout.toml"),
        include_str!("fixtures/inline-tables.setup.toml"),
    ),
    (
        "other-tables",
        include_str!("fixtures/other-tables.toml"),
        include_str!("fixtures/other-tables.logout.toml"),
        include_str!("fixtures/other-tables.setup.toml"),
    ),
    (
        "multi-line-arrays",
        include_str!("fixtures/multi-line-arrays.toml"),
        include_str!("fixtures/multi-line-arrays.logout.toml"),
        include_str!("fixtures/multi-line-arrays.setup.toml"),
    ),
    (
        "multi-line-string",
        include_str!("fixtures/multi-line-string.toml"),
        include_str!("fixtures/multi-line-string.logout.toml"),
        include_str!("fixtures/multi-line-string.setup.toml"),
    ),
];

const LOCAL: ProviderSettings<'static> = ProviderSettings {
    provider: "openai",
    model: "qwen2.5-coder",
    table: Some("openai"),
    base_url: "http://127.0.0.1:8080/v1",
    api_key: "",
};

fn here() -> &'static Path {
    Path::new("config.toml")
}

/// The keys a configuration holds in the services' tables, as the engine reads it.
fn stored_keys(text: &str) -> Vec<String> {
    let table: toml::Table = toml::from_str(text).expect("valid TOML");
    let mut keys = Vec::new();
    for service in ["openai", "anthropic"] {
        let Some(section) = table.get(service).and_then(toml::Value::as_table) else {
            continue;
        };
        for key in ["api_key", "api_keys"] {
            if let Some(value) = section.get(key) {
                keys.push(format!("{service}.{key} = {value:?}"));
            }
        }
    }
    keys
}

#[test]
fn logout_removes_only_the_stored_keys_of_real_files_byte_for_byte() {
    for (name, file, expected, _) in FILES {
        assert!(!stored_keys(file).is_empty(), "{name} holds keys");
        let kept = without_keys(file, here())
            .expect("parses")
            .unwrap_or_else(|| panic!("{name}: keys removed"));
        assert_eq!(&kept, expected, "{name}");
        assert!(stored_keys(&kept).is_empty(), "{name}: {kept}");
        // Nothing left to forget the second time.
        assert_eq!(without_keys(&kept, here()).expect("parses"), None, "{name}");
    }
}

#[test]
fn setup_changes_the_provider_model_address_and_key_and_keeps_every_other_byte() {
    for (name, file, _, expected) in FILES {
        let written = with_provider(file, &LOCAL, here()).expect("edited");
        assert_eq!(&written, expected, "{name}");
        let table: toml::Table = toml::from_str(&written).expect("valid");
        assert_eq!(table["provider"].as_str(), Some("openai"), "{name}");
        assert_eq!(table["model"].as_str(), Some("qwen2.5-coder"), "{name}");
        assert_eq!(
            table["openai"]["base_url"].as_str(),
            Some("http://127.0.0.1:8080/v1")
        );
        assert_eq!(table["openai"]["api_key"].as_str(), Some(""), "{name}");
        assert!(table["openai"].get("api_keys").is_none(), "{name}");
        // Setting the same again changes nothing.
        assert_eq!(
            with_provider(&written, &LOCAL, here()).expect("again"),
            written,
            "{name}"
        );
    }
}

#[test]
fn a_file_that_is_not_toml_is_left_and_named() {
    let broken = "model = \"m\"\n[openai\napi_key = \"sk\"\n";
    let error = without_keys(broken, here()).expect_err("not TOML");
    assert!(error.to_string().contains("config.toml"), "{error}");
    assert!(with_provider(broken, &LOCAL, here()).is_err());
    let not_a_table = "openai = \"a string\"\n";
    let error = with_provider(not_a_table, &LOCAL, here()).expect_err("no table");
    assert!(error.to_string().contains("[openai]"), "{error}");
}

#[test]
fn the_rewrite_is_private_whole_and_leaves_nothing_beside_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "model = \"old\"\n").expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    rewrite(&path, "model = \"new\"\n").expect("rewritten");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "model = \"new\"\n"
    );
    let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["config.toml"]);
    assert_eq!(read(&dir.path().join("none.toml")).expect("read"), None);
}

/// With the `failpoints` feature: a rewrite that fails before the rename (as a full disk
/// would) leaves the old file whole and no temporary file.
#[cfg(feature = "failpoints")]
#[test]
fn a_rewrite_that_fails_before_the_rename_leaves_the_old_file() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "model = \"old\"\n").expect("write");
    fail::cfg("config::rewrite::before", "return").expect("failpoint");
    assert!(rewrite(&path, "model = \"new\"\n").is_err());
    fail::remove("config::rewrite::before");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "model = \"old\"\n"
    );
    assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 1);
    scenario.teardown();
}
