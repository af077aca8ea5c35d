//! Copying a folder tree: regular files and folders, and links either kept as links or left
//! out, never followed (a link inside must not copy what it points at).

use std::io;
use std::path::Path;

/// What a copy does with the symbolic links it meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Left out.
    Skip,
    /// Copied as links to the same target.
    Keep,
}

/// Copies the tree at `from` into `to` (created as needed); anything else (sockets, pipes,
/// devices) is left out.
pub fn copy_tree(from: &Path, to: &Path, links: Links) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target, links)?;
        } else if kind.is_symlink() {
            if links == Links::Keep {
                std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
            }
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree_with_a_link() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("dir");
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join("sub")).expect("sub");
        std::fs::write(from.join("sub/a.txt"), "a").expect("a");
        std::fs::write(dir.path().join("secret"), "s").expect("secret");
        std::os::unix::fs::symlink(dir.path().join("secret"), from.join("link")).expect("link");
        dir
    }

    #[test]
    fn links_are_kept_as_links_or_left_out_and_never_followed() {
        let dir = tree_with_a_link();
        let kept = dir.path().join("kept");
        copy_tree(&dir.path().join("from"), &kept, Links::Keep).expect("copy");
        assert_eq!(
            std::fs::read_to_string(kept.join("sub/a.txt")).expect("a"),
            "a"
        );
        let link = std::fs::symlink_metadata(kept.join("link")).expect("link");
        assert!(link.file_type().is_symlink());
        let skipped = dir.path().join("skipped");
        copy_tree(&dir.path().join("from"), &skipped, Links::Skip).expect("copy");
        assert!(skipped.join("sub/a.txt").is_file());
        assert!(std::fs::symlink_metadata(skipped.join("link")).is_err());
    }
}
