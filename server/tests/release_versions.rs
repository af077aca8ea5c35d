//! The release's versions move in lock-step with the workspace's: the registry entry (its
//! version, every archive URL, the npm and PyPI package specs), the npm launcher and its
//! platform packages, and the VS Code extension. A release with one of them behind fails
//! here, not in the registry's CI.

// A test file: a failed set-up step is a failed test.
#![allow(clippy::expect_used)]

use std::path::Path;

fn json(path: &str) -> serde_json::Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join(path)).expect(path);
    serde_json::from_str(&text).expect(path)
}

#[test]
fn every_published_version_is_the_workspaces() {
    let version = env!("CARGO_PKG_VERSION");
    let entry = json("clients/registry/agent.json");
    assert_eq!(entry["version"], version, "agent.json");
    assert_eq!(entry["id"], "talaria");
    let distribution = &entry["distribution"];
    // The four built platforms (no Windows build yet, which the registry's tools accept with
    // a warning), each run from inside the folder its archive unpacks to.
    let archives = distribution["binary"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut platforms: Vec<&String> = archives.keys().collect();
    platforms.sort();
    assert_eq!(
        platforms,
        [
            "darwin-aarch64",
            "darwin-x86_64",
            "linux-aarch64",
            "linux-x86_64"
        ]
    );
    for (platform, target) in &archives {
        let archive = target["archive"].as_str().expect("archive");
        assert!(
            archive.contains(&format!("/v{version}/talaria-{version}-{platform}.tar.gz")),
            "{platform}: {archive}"
        );
        assert_eq!(
            target["cmd"],
            format!("./talaria-{version}-{platform}/talaria"),
            "{platform}"
        );
        assert_eq!(target["args"], serde_json::json!(["acp"]), "{platform}");
    }
    assert_eq!(
        distribution["npx"]["package"],
        format!("talaria-agent@{version}")
    );
    assert_eq!(
        distribution["uvx"]["package"],
        format!("talaria-agent=={version}")
    );
    let launcher = json("clients/registry/npm/package.json");
    assert_eq!(launcher["version"], version, "npm launcher");
    for (name, wanted) in launcher["optionalDependencies"]
        .as_object()
        .expect("platform packages")
    {
        assert_eq!(wanted, version, "{name}");
    }
    assert_eq!(
        json("clients/vscode/package.json")["version"],
        version,
        "the VS Code extension"
    );
}

#[test]
fn one_license_everywhere() {
    assert_eq!(json("clients/vscode/package.json")["license"], "Apache-2.0");
    assert_eq!(
        json("clients/registry/npm/package.json")["license"],
        "Apache-2.0"
    );
    assert_eq!(json("clients/registry/agent.json")["license"], "Apache-2.0");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let license = std::fs::read_to_string(root.join("LICENSE")).expect("LICENSE");
    assert!(license.contains("Apache License") && license.contains("Version 2.0"));
}
