//! The configuration reference: every setting of `config.toml` with its type, default,
//! environment override and meaning, rendered from the declaration (`schema.rs`) as
//! `docs/configuration.md` (`talaria config reference`), and the declared variables set in an
//! environment (what `talaria doctor` and `talaria setup` report). A test holds the document
//! to what this renders.

use super::declare::{Key, Section};
use super::schema::FileConfig;

/// Every table of the file as the reference shows it, in the declaration's order; a
/// service's table (`[openai]`) with its variables and address from `crate::providers`.
pub fn sections() -> Vec<Section> {
    let mut sections = FileConfig::sections();
    for section in &mut sections {
        if let Some(service) = crate::providers::service_of_table(&section.table) {
            for key in &mut section.keys {
                let (env, default) = service.setting(&key.name);
                key.env = env.or(key.env);
                if let Some(default) = default {
                    key.default = default.to_string();
                }
            }
        }
    }
    sections
}

/// A key's path in the file (`model`, `sandbox.network`, `fallback[].model`).
fn path_of(section: &Section, key: &Key) -> String {
    match section.table.as_str() {
        "" => key.name.clone(),
        table => format!("{table}.{}", key.name),
    }
}

/// Every declared variable set (not empty) in `env`, with the key it overrides, in the
/// reference's order.
pub fn variables_set(env: &dyn Fn(&str) -> Option<String>) -> Vec<(&'static str, String)> {
    let mut set: Vec<(&'static str, String)> = Vec::new();
    for section in sections() {
        for key in &section.keys {
            let Some(variable) = key.env else { continue };
            let given = env(variable).is_some_and(|value| !value.trim().is_empty());
            if given && !set.iter().any(|(seen, _)| *seen == variable) {
                set.push((variable, path_of(&section, key)));
            }
        }
    }
    set
}

/// The document: an introduction, then one table per part of the file.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration\n\n\
         Talaria reads `$TALARIA_HOME/config.toml` (`~/.talaria/config.toml` by default); every \
         setting is optional, and a variable in the agent's environment overrides the file. \
         `talaria setup` writes a first file, `talaria doctor` checks it (a mistyped key is named \
         with the key it is probably a typo of, and the variables that override the file are \
         listed). This page is generated from the settings' declaration \
         (`server/crates/engine/src/config/schema.rs`; `talaria config reference` prints it); a \
         test fails when the two differ.\n",
    );
    for section in sections() {
        out.push_str(&format!("\n## {}\n\n", heading(&section.table)));
        if !section.doc.is_empty() {
            out.push_str(&format!("{}\n\n", section.doc));
        }
        out.push_str("| Setting | Type | Default | Variable | Meaning |\n|---|---|---|---|---|\n");
        for key in &section.keys {
            let env = key.env.map(|v| format!("`{v}`")).unwrap_or_default();
            out.push_str(&format!(
                "| `{}` | {} | {} | {env} | {} |\n",
                path_of(&section, key),
                key.kind,
                key.default,
                key.doc
            ));
        }
    }
    out
}

fn heading(table: &str) -> String {
    match table {
        "" => "The model and the session".into(),
        list if list.ends_with("[]") => format!("`[[{}]]`", list.trim_end_matches("[]")),
        other => format!("`[{other}]`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::declare::Table;

    /// The command that regenerates the document.
    const UPDATE_COMMAND: &str = "UPDATE_DOCS=1 cargo test -p talaria-engine config::reference";

    /// The declaration's rows are the parser's own fields, table by table: the document
    /// cannot list a key the parser does not know, nor leave one out.
    #[test]
    fn every_field_the_parser_knows_is_in_the_reference_and_nothing_else() {
        let tables = FileConfig::tables();
        for section in sections() {
            let fields: &[&str] = match section.table.as_str() {
                "" => FileConfig::fields(),
                table => {
                    let name = table.split(['.', '[']).next().unwrap_or_default();
                    tables
                        .iter()
                        .find(|(field, _)| *field == name)
                        .map(|(_, fields)| *fields)
                        .unwrap_or_else(|| panic!("no table {name} in the parser"))
                }
            };
            // A table inside the table is documented by its keys (`PreToolUse[].command`).
            let mut documented: Vec<&str> = section
                .keys
                .iter()
                .map(|k| k.name.split(['.', '[']).next().unwrap_or_default())
                .collect();
            let mut parsed: Vec<&str> = fields
                .iter()
                .copied()
                .filter(|field| {
                    !section.table.is_empty() || !tables.iter().any(|(t, _)| t == field)
                })
                .collect();
            documented.sort_unstable();
            documented.dedup();
            parsed.sort_unstable();
            assert_eq!(documented, parsed, "table `{}`", section.table);
            assert!(
                section.keys.iter().all(|k| !k.doc.is_empty()),
                "{}",
                section.table
            );
        }
    }

    /// A service's address and keys are read from its own table: a service added to the
    /// provider table without one fails here.
    #[test]
    fn every_service_has_its_table_in_the_declaration() {
        let file: FileConfig =
            toml::from_str("[openai]\nbase_url = \"http://a/v1\"\n[anthropic]\napi_key = \"k\"\n")
                .expect("parses");
        for service in crate::providers::SERVICES {
            assert!(
                file.table_named(service.table)
                    .is_some_and(|t| t.is::<super::super::schema::FileEndpoint>()),
                "no [{}] table declared",
                service.table
            );
        }
        assert_eq!(
            file.service("openai").base_url().as_deref(),
            Some("http://a/v1")
        );
        assert_eq!(file.service("anthropic").api_key().as_deref(), Some("k"));
        assert_eq!(file.service("palm").base_url(), None);
    }

    #[test]
    fn defaults_and_types_come_from_the_declaration() {
        let all = sections();
        let find = |path: &str| {
            all.iter()
                .flat_map(|s| s.keys.iter().map(move |k| (path_of(s, k), k.clone())))
                .find(|(p, _)| p == path)
                .map(|(_, k)| k)
                .unwrap_or_else(|| panic!("{path} is not declared"))
        };
        let turns = find("max_turn_requests");
        assert_eq!(
            (turns.kind.as_str(), turns.default.as_str()),
            ("integer", "90")
        );
        let threshold = find("compression.threshold");
        assert_eq!(
            threshold.default,
            talaria_compress::Settings::default().threshold.to_string()
        );
        let processes = find("sandbox.max_processes");
        assert_eq!(
            processes.default,
            talaria_sandbox::DEFAULT_MAX_PROCESSES.to_string()
        );
        let url = find("anthropic.base_url");
        assert_eq!(url.env, Some("ANTHROPIC_BASE_URL"));
        assert_eq!(url.default, crate::providers::ANTHROPIC.default_url);
        assert_eq!(find("fallback[].model").default, "required");
        assert!(
            find("prices").kind.contains("cached_input"),
            "Price's own fields"
        );
        assert_eq!(find("mcp_servers.<name>.type").default, "http");
    }

    #[test]
    fn the_variables_set_are_named_with_the_keys_they_override() {
        let env = |name: &str| match name {
            "TALARIA_MODEL" => Some("m".to_string()),
            "OPENAI_API_KEY" => Some("k".to_string()),
            "TALARIA_SANDBOX" => Some(" ".to_string()),
            _ => None,
        };
        assert_eq!(
            variables_set(&env),
            [
                ("TALARIA_MODEL", "model".to_string()),
                ("OPENAI_API_KEY", "openai.api_key".to_string()),
            ]
        );
    }

    /// The settings documentation test: `docs/configuration.md` is what the declaration
    /// renders. `UPDATE_DOCS=1` writes it instead of failing.
    #[test]
    fn the_document_is_what_the_declaration_renders() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../docs/configuration.md");
        let written = std::fs::read_to_string(&path).unwrap_or_default();
        let rendered = markdown();
        if written == rendered {
            return;
        }
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(&path, &rendered).expect("docs/configuration.md is writable");
            return;
        }
        let differences: Vec<String> = written
            .lines()
            .map(Some)
            .chain(std::iter::repeat(None))
            .zip(rendered.lines().map(Some).chain(std::iter::repeat(None)))
            .take_while(|pair| *pair != (None, None))
            .enumerate()
            .filter(|(_, (old, new))| old != new)
            .take(5)
            .map(|(line, (old, new))| {
                format!(
                    "line {}:\n  - {}\n  + {}",
                    line + 1,
                    old.unwrap_or("(none)"),
                    new.unwrap_or("(none)")
                )
            })
            .collect();
        panic!(
            "{} differs from the settings' declaration:\n{}\nrun `{UPDATE_COMMAND}`",
            path.display(),
            differences.join("\n")
        );
    }
}
