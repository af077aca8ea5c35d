//! `config.toml` changed in place, every other byte kept: `talaria setup` sets the provider,
//! model, address and key of a file that exists, and `logout` removes the stored keys. Both
//! go through `toml_edit` (a format-preserving TOML parser): removals cut exactly the
//! setting the parser located, settings are changed through its document, so comments,
//! other tables, inline tables, multi-line values and strings that merely look like a
//! setting stay as they were. The file is replaced atomically: a private temporary file
//! beside it (0600), synced, renamed over it, the folder synced; the failpoints
//! `config::rewrite::before` (nothing changed yet) and `config::rewrite::after` (the new
//! file in place) stand on either side of the rename.

use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml_edit::{Document, DocumentMut, Item, TableLike, Value};

/// Why the file could not be read, understood or written.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is not valid TOML ({why}); correct it, or move it away and run `talaria setup`"
    )]
    Unparsable { path: PathBuf, why: String },
    #[error("{path}: [{table}] is not a table; correct it by hand")]
    NotATable { path: PathBuf, table: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The settings `talaria setup` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSettings<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    /// The table of the service's address and key (`openai`, `anthropic`); `None` for a
    /// provider that has neither (the built-in demo).
    pub table: Option<&'a str>,
    pub base_url: &'a str,
    pub api_key: &'a str,
}

/// The file's text; `None` when there is no file.
pub fn read(path: &Path) -> Result<Option<String>, ConfigFileError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigFileError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// `text` without the keys stored in the services' tables (`api_key` and `api_keys` under
/// `[openai]` and `[anthropic]`, as a table, dotted keys or an inline table); `None` when it
/// holds none. An `api_key` anywhere else (an MCP server's environment, say) stays.
pub fn without_keys(text: &str, path: &Path) -> Result<Option<String>, ConfigFileError> {
    let tables: Vec<&str> = talaria_engine::key_tables().collect();
    let kept = without_settings(text, &tables, &["api_key", "api_keys"], path)?;
    if let Some(kept) = &kept {
        still_the_same_configuration(kept, path)?;
    }
    Ok(kept)
}

/// `text` with `settings` in place: `provider` and `model` at the top, the address and key in
/// the service's table (a pool of keys there goes: it would win over the key). Settings
/// that exist keep their place and spacing; new ones go at the end of their table.
pub fn with_provider(
    text: &str,
    settings: &ProviderSettings<'_>,
    path: &Path,
) -> Result<String, ConfigFileError> {
    let text = match settings.table {
        Some(table) => without_settings(text, &[table], &["api_keys"], path)?
            .unwrap_or_else(|| text.to_string()),
        None => text.to_string(),
    };
    let mut document: DocumentMut = text.parse().map_err(|e| unparsable(path, &e))?;
    set(document.as_table_mut(), "provider", settings.provider);
    set(document.as_table_mut(), "model", settings.model);
    if let Some(name) = settings.table {
        let entry = document
            .as_table_mut()
            .entry(name)
            .or_insert_with(toml_edit::table);
        let table = entry
            .as_table_like_mut()
            .ok_or_else(|| ConfigFileError::NotATable {
                path: path.to_path_buf(),
                table: name.to_string(),
            })?;
        set(table, "base_url", settings.base_url);
        set(table, "api_key", settings.api_key);
    }
    let written = document.to_string();
    still_the_same_configuration(&written, path)?;
    Ok(written)
}

/// Sets `key` to `text` in `table`: a value there keeps its place and the spacing around it.
fn set(table: &mut dyn TableLike, key: &str, text: &str) {
    match table.get_mut(key).and_then(Item::as_value_mut) {
        Some(value) => {
            let decor = value.decor().clone();
            *value = Value::from(text);
            *value.decor_mut() = decor;
        }
        None => {
            table.insert(key, toml_edit::value(text));
        }
    }
}

fn unparsable(path: &Path, error: &dyn std::fmt::Display) -> ConfigFileError {
    ConfigFileError::Unparsable {
        path: path.to_path_buf(),
        why: error.to_string().trim().replace('\n', " "),
    }
}

/// What is written must still be read by the engine's own parser.
fn still_the_same_configuration(text: &str, path: &Path) -> Result<(), ConfigFileError> {
    toml::from_str::<toml::Table>(text)
        .map(|_| ())
        .map_err(|e| unparsable(path, &e))
}

/// `text` without `keys` in `tables`, each cut where the parser found it; `None` when none
/// is there.
fn without_settings(
    text: &str,
    tables: &[&str],
    keys: &[&str],
    path: &Path,
) -> Result<Option<String>, ConfigFileError> {
    let document = Document::parse(text).map_err(|e| unparsable(path, &e))?;
    let mut cuts: Vec<Range<usize>> = Vec::new();
    for table in tables {
        let Some(item) = document.as_table().get(table) else {
            continue;
        };
        for key in keys {
            cuts.extend(setting_cut(text, item, key));
        }
    }
    if cuts.is_empty() {
        return Ok(None);
    }
    cuts.sort_by_key(|cut| cut.start);
    let mut kept = String::with_capacity(text.len());
    let mut at = 0;
    for cut in cuts {
        if cut.start < at {
            continue;
        }
        kept.push_str(&text[at..cut.start]);
        at = cut.end;
    }
    kept.push_str(&text[at..]);
    Ok(Some(kept))
}

/// The bytes that hold `key` of the table `item`, when it is there.
fn setting_cut(text: &str, item: &Item, key: &str) -> Option<Range<usize>> {
    if let Some(table) = item.as_table() {
        let (key, value) = table.get_key_value(key)?;
        return Some(line_cut(text, key.span()?.start, value.span()?.end));
    }
    let inline = item.as_inline_table()?;
    let (key, value) = inline.get_key_value(key)?;
    Some(inline_cut(text, key.span()?.start, value.span()?.end))
}

/// A setting on lines of its own (a table's, or a dotted key's): from the start of its line
/// to the end of its value, and the end of the line when nothing follows it there; a
/// comment that follows stays, on its own line.
fn line_cut(text: &str, key_start: usize, value_end: usize) -> Range<usize> {
    let line_start = text[..key_start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[value_end..]
        .find('\n')
        .map_or(text.len(), |i| value_end + i + 1);
    let rest = &text[value_end..line_end];
    match rest.find('#') {
        Some(comment) => line_start..value_end + comment,
        None => line_start..line_end,
    }
}

/// A setting in an inline table: it and the comma that parts it from its neighbour.
fn inline_cut(text: &str, key_start: usize, value_end: usize) -> Range<usize> {
    let after = &text[value_end..];
    let spaces = after.len() - after.trim_start().len();
    if after.trim_start().starts_with(',') {
        let past_comma = value_end + spaces + 1;
        let more = &text[past_comma..];
        let spaces = more.len() - more.trim_start_matches([' ', '\t']).len();
        return key_start..past_comma + spaces;
    }
    let before = text[..key_start].trim_end();
    match before.strip_suffix(',') {
        Some(kept) => kept.len()..value_end,
        None => key_start..value_end,
    }
}

/// Replaces the file at `path` with `text` atomically and privately (0600).
pub fn rewrite(path: &Path, text: &str) -> Result<(), ConfigFileError> {
    let failed = |source| ConfigFileError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(failed)?;
    let mut staged = tempfile::Builder::new()
        .prefix(".config.toml.")
        .suffix(".partial")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(failed)?;
    staged.write_all(text.as_bytes()).map_err(failed)?;
    staged.as_file().sync_all().map_err(failed)?;
    if talaria_util::failpoint::injected("config::rewrite::before") {
        return Err(failed(std::io::Error::other(
            "failpoint config::rewrite::before",
        )));
    }
    staged.persist(path).map_err(|e| failed(e.error))?;
    // The rename itself is made durable with the folder's entry.
    std::fs::File::open(dir)
        .and_then(|folder| folder.sync_all())
        .map_err(failed)?;
    talaria_util::failpoint::step("config::rewrite::after");
    Ok(())
}

#[cfg(test)]
mod tests;
