//! `SKILL.md` front matter: a YAML block between `---` lines at the top of the file.

use crate::SkillError;

use serde_json::{Map, Value};
use yaml_rust2::{Yaml, YamlLoader};

/// Splits a document into its front matter (as JSON) and its body.
pub fn split(text: &str) -> Result<(Value, &str), SkillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or_else(|| {
            SkillError::Invalid("SKILL.md must start with a `---` front matter block".into())
        })?;
    let end = rest
        .match_indices("\n---")
        .find(|(at, _)| {
            let after = &rest[at + 4..];
            after.is_empty() || after.starts_with('\n') || after.starts_with("\r\n")
        })
        .map(|(at, _)| at)
        .ok_or_else(|| {
            SkillError::Invalid("the front matter block is not closed by a `---` line".into())
        })?;
    let yaml = &rest[..end];
    let body = rest[end + 4..].trim_start_matches(['\r', '\n']);
    let docs = YamlLoader::load_from_str(yaml)
        .map_err(|e| SkillError::Invalid(format!("front matter: {e}")))?;
    let value = docs.into_iter().next().map_or(Value::Null, to_json);
    if !value.is_object() {
        return Err(SkillError::Invalid(
            "the front matter must be a mapping of keys to values".into(),
        ));
    }
    Ok((value, body))
}

/// YAML as JSON (keys become strings).
fn to_json(yaml: Yaml) -> Value {
    match yaml {
        Yaml::Real(text) => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::String(text), Value::Number),
        Yaml::Integer(n) => Value::from(n),
        Yaml::String(s) => Value::String(s),
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Array(items) => Value::Array(items.into_iter().map(to_json).collect()),
        Yaml::Hash(hash) => {
            let mut map = Map::new();
            for (key, value) in hash {
                let key = match key {
                    Yaml::String(s) => s,
                    Yaml::Integer(n) => n.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    other => format!("{other:?}"),
                };
                map.insert(key, to_json(value));
            }
            Value::Object(map)
        }
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_and_body_are_split() {
        let (meta, body) = split(
            "---\nname: fix-tests\ndescription: \"How: run them\"\nmetadata:\n  tags: [rust, ci]\n---\n\n# Steps\n1. run\n",
        )
        .expect("parses");
        assert_eq!(meta["name"], "fix-tests");
        assert_eq!(meta["description"], "How: run them");
        assert_eq!(meta["metadata"]["tags"][1], "ci");
        assert_eq!(body, "# Steps\n1. run\n");
        assert!(split("no front matter").is_err());
        assert!(split("---\nname: x\n").is_err());
        assert!(split("---\n- a list\n---\nbody").is_err());
        assert!(split("---\nname: [unclosed\n---\nbody").is_err());
    }
}
