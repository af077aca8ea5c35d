//! The folders an overlay mount shows, read from its line in the mount table: an overlay
//! whose layer (`lowerdir`, `upperdir`) is the home shows every file of the home at its mount
//! point, so each layer is a folder the mount gives a second name (see `aliases.rs`). The
//! kernel writes the layers as the mounter gave them: `lowerdir=` a `:`-separated list with
//! the mounter's own `\` escapes (`\:` a colon in a name), `lowerdir+=`/`datadir+=`/
//! `upperdir=` one folder each; all with the table's `\040`-style escapes. A layer given
//! by a relative path is left out: the folder it was relative to is not in the table.

use std::path::PathBuf;

/// The file system types of the kernel's overlay (`overlayfs` on kernels before 4.0).
const OVERLAY_TYPES: &[&str] = &["overlay", "overlayfs"];

/// The layers an overlay mount shows, from its mount table line; none for other mounts.
/// Each is where it leads when it is a link that exists (Docker names its layers through
/// short links).
pub(crate) fn layers(line: &str) -> Vec<PathBuf> {
    // Fields after the separator: type, source, the file system's own options.
    let Some((_, tail)) = line.split_once(" - ") else {
        return Vec::new();
    };
    let mut fields = tail.split(' ');
    let (Some(kind), Some(_source), Some(options)) = (fields.next(), fields.next(), fields.next())
    else {
        return Vec::new();
    };
    if !OVERLAY_TYPES.contains(&kind) {
        return Vec::new();
    }
    options
        .split(',')
        .filter_map(|option| option.split_once('='))
        .flat_map(|(key, value)| match key {
            "lowerdir" => split_list(value),
            "upperdir" => vec![unescape(value)],
            "lowerdir+" | "datadir+" => vec![crate::mountinfo_path::mountinfo_path(value)],
            _ => Vec::new(),
        })
        .filter(|layer| layer.is_absolute())
        .map(|layer| layer.canonicalize().unwrap_or(layer))
        .collect()
}

/// A `lowerdir=` list: split at each colon the mounter did not escape.
fn split_list(value: &str) -> Vec<PathBuf> {
    let mut layers = Vec::new();
    let mut rest = value;
    while !rest.is_empty() {
        let end = separator(rest).unwrap_or(rest.len());
        layers.push(unescape(&rest[..end]));
        rest = rest.get(end + 1..).unwrap_or("");
    }
    layers.retain(|layer| !layer.as_os_str().is_empty());
    layers
}

/// Where the first layer of `list` ends: its first raw colon that a `\` of the mounter's
/// (written `\134` in the table) does not escape.
fn separator(list: &str) -> Option<usize> {
    let bytes = list.as_bytes();
    let mut i = 0;
    let mut escaped = false;
    while i < bytes.len() {
        let (byte, width) = table_byte(list, i);
        if escaped {
            escaped = false;
        } else if byte == b'\\' {
            escaped = true;
        } else if byte == b':' && width == 1 {
            return Some(i);
        }
        i += width;
    }
    None
}

/// The byte at `at` of a mount table field: a `\NNN` escape's byte and its width 4, or the
/// byte itself and width 1.
fn table_byte(field: &str, at: usize) -> (u8, usize) {
    let bytes = field.as_bytes();
    if bytes[at] == b'\\'
        && let Some(code) = field
            .get(at + 1..at + 4)
            .and_then(|digits| u8::from_str_radix(digits, 8).ok())
    {
        return (code, 4);
    }
    (bytes[at], 1)
}

/// One layer as a path: the table's escapes decoded, then the mounter's (`\x` is `x`).
fn unescape(field: &str) -> PathBuf {
    let decoded = crate::mountinfo_path::mountinfo_path(field);
    let text = decoded.to_string_lossy();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    PathBuf::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(options: &str) -> String {
        format!("48 27 0:40 / /mnt/ovl rw,relatime - overlay overlay rw,{options},uuid=on")
    }

    #[test]
    fn lower_and_upper_layers_are_read_with_both_kinds_of_escape() {
        // As Linux 6.18 writes `lowerdir=/l a:/l\:b:/c,upperdir=/u`.
        let found = layers(&line(
            r"lowerdir=/srv/l\040a:/srv/l\134:b:/srv/c\054d,upperdir=/srv/u,workdir=/srv/w",
        ));
        assert_eq!(
            found,
            [
                PathBuf::from("/srv/l a"),
                PathBuf::from("/srv/l:b"),
                PathBuf::from("/srv/c,d"),
                PathBuf::from("/srv/u"),
            ]
        );
    }

    #[test]
    fn data_only_layers_and_layers_added_one_by_one_count_too() {
        let found = layers(&line(r"lowerdir=/a::/data"));
        assert_eq!(found, [PathBuf::from("/a"), PathBuf::from("/data")]);
        let found = layers(&line(r"lowerdir+=/x\134y:z,datadir+=/d"));
        assert_eq!(found, [PathBuf::from(r"/x\y:z"), PathBuf::from("/d")]);
    }

    #[test]
    fn relative_layers_other_file_systems_and_garbage_give_nothing() {
        assert!(layers(&line("lowerdir=low,upperdir=up,workdir=work")).is_empty());
        assert!(
            layers("30 22 254:1 /home /mnt/homes rw - ext4 /dev/vda rw,lowerdir=/x").is_empty()
        );
        assert!(layers("garbage").is_empty());
        assert!(layers("1 2 3 - overlay").is_empty());
        // A trailing escape of the mounter's escapes nothing.
        assert_eq!(layers(&line(r"lowerdir=/t\134")), [PathBuf::from("/t")]);
    }

    #[test]
    fn a_layer_named_through_a_link_is_where_it_leads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        std::os::unix::fs::symlink(&real, dir.path().join("l")).expect("link");
        let found = layers(&line(&format!("lowerdir={}/l", dir.path().display())));
        assert_eq!(found, [real.canonicalize().expect("real")]);
    }
}
