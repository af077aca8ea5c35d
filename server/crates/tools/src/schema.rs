//! Checks tool arguments against the tool's JSON Schema and fixes the usual model slips:
//! `"5"` for 5, `"true"` for true, a lone item for a one-item array, a JSON string for an
//! object or array, `null` for an optional field. Everything else that does not fit is an
//! error message naming the field.

use crate::error::ArgsError;

use serde_json::{Map, Value};

/// Coerces `args` in place to fit `schema`, or says what does not fit.
pub fn coerce_and_validate(schema: &Value, args: &mut Value) -> Result<(), ArgsError> {
    check(schema, args, "")
}

fn field_name(path: &str) -> String {
    if path.is_empty() {
        "arguments".into()
    } else {
        format!("`{path}`")
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        format!("{}…", text.chars().take(60).collect::<String>())
    } else {
        text
    }
}

fn check(schema: &Value, value: &mut Value, path: &str) -> Result<(), ArgsError> {
    let Some(expected) = schema.get("type").and_then(Value::as_str) else {
        return Ok(());
    };
    coerce(expected, value);
    let fits = match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.as_i64().is_some() || value.as_u64().is_some(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => true,
    };
    if !fits {
        return Err(ArgsError(format!(
            "{} must be {}, got {}",
            field_name(path),
            match expected {
                "object" => "an object",
                "array" => "an array",
                "string" => "a string",
                "integer" => "an integer",
                "number" => "a number",
                "boolean" => "a boolean",
                other => other,
            },
            match value {
                Value::Null => "null".to_string(),
                other => format!("{} {}", type_of(other), short(other)),
            }
        )));
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let allowed: Vec<String> = options.iter().map(Value::to_string).collect();
        return Err(ArgsError(format!(
            "{} must be one of {}, got {}",
            field_name(path),
            allowed.join(", "),
            short(value)
        )));
    }
    if let Some(number) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && number < min
        {
            return Err(ArgsError(format!(
                "{} must be at least {min}, got {number}",
                field_name(path)
            )));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && number > max
        {
            return Err(ArgsError(format!(
                "{} must be at most {max}, got {number}",
                field_name(path)
            )));
        }
    }
    match value {
        Value::Object(object) => check_object(schema, object, path),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    check(item_schema, item, &format!("{path}[{index}]"))?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn check_object(
    schema: &Value,
    object: &mut Map<String, Value>,
    path: &str,
) -> Result<(), ArgsError> {
    let properties = schema.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // `null` for an optional field means "not given".
    object.retain(|key, value| !value.is_null() || required.contains(&key.as_str()));
    for key in &required {
        if !object.contains_key(*key) {
            return Err(ArgsError(format!(
                "missing required field `{}`",
                join(path, key)
            )));
        }
    }
    if let Some(properties) = properties {
        for (key, value) in object.iter_mut() {
            if let Some(property) = properties.get(key) {
                check(property, value, &join(path, key))?;
            }
        }
    }
    Ok(())
}

fn coerce(expected: &str, value: &mut Value) {
    let replacement = match (expected, &*value) {
        ("integer", Value::String(s)) => s.trim().parse::<i64>().ok().map(Value::from),
        ("integer", Value::Number(n)) => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && n.as_i64().is_none() && n.as_u64().is_none())
            .map(|f| Value::from(f as i64)),
        ("number", Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        ("boolean", Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" => Some(Value::Bool(true)),
            "false" | "no" | "0" => Some(Value::Bool(false)),
            _ => None,
        },
        ("boolean", Value::Number(n)) => match n.as_i64() {
            Some(0) => Some(Value::Bool(false)),
            Some(1) => Some(Value::Bool(true)),
            _ => None,
        },
        ("string", Value::Number(n)) => Some(Value::String(n.to_string())),
        ("string", Value::Bool(b)) => Some(Value::String(b.to_string())),
        ("array", Value::String(s)) if s.trim_start().starts_with('[') => {
            serde_json::from_str::<Value>(s)
                .ok()
                .filter(Value::is_array)
        }
        ("object", Value::String(s)) if s.trim_start().starts_with('{') => {
            serde_json::from_str::<Value>(s)
                .ok()
                .filter(Value::is_object)
        }
        ("array", Value::Null) => None,
        ("array", other) if !other.is_array() => Some(Value::Array(vec![other.clone()])),
        _ => None,
    };
    if let Some(replacement) = replacement {
        *value = replacement;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1},
                "all": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}
            },
            "required": ["path"]
        })
    }

    fn run(mut args: Value) -> Result<Value, String> {
        coerce_and_validate(&schema(), &mut args)
            .map(|()| args)
            .map_err(|e| e.0)
    }

    #[test]
    fn usual_slips_are_fixed() {
        let fixed = run(
            json!({"path": 5, "limit": "10", "all": "true", "mode": null,
            "items": "[{\"n\": \"3\"}]"}),
        )
        .expect("coerced");
        assert_eq!(
            fixed,
            json!({"path": "5", "limit": 10, "all": true, "items": [{"n": 3}]})
        );
        let single = run(json!({"path": "p", "items": {"n": 1}})).expect("wrapped");
        assert_eq!(single["items"], json!([{"n": 1}]));
    }

    #[test]
    fn misfits_name_the_field() {
        assert_eq!(
            run(json!({})).expect_err("expected an error"),
            "missing required field `path`"
        );
        assert!(
            run(json!({"path": "p", "limit": "ten"}))
                .expect_err("expected an error")
                .contains("`limit` must be an integer")
        );
        assert!(
            run(json!({"path": "p", "limit": 0}))
                .expect_err("expected an error")
                .contains("at least 1")
        );
        assert!(
            run(json!({"path": "p", "mode": "c"}))
                .expect_err("expected an error")
                .contains("one of \"a\", \"b\"")
        );
        assert!(
            run(json!({"path": "p", "items": [{"m": 1}]}))
                .expect_err("expected an error")
                .contains("items[0].n")
        );
        assert!(
            run(json!({"path": ["x"]}))
                .expect_err("expected an error")
                .contains("`path` must be a string")
        );
    }
}
