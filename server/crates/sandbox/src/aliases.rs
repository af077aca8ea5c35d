//! The other names a path has through bind mounts: the same folder mounted at a second place
//! (a home bind-mounted under `/mnt`, a container's volume) reaches the same files, so a
//! hidden place is hidden at each of its names. Read from the kernel's mount table
//! (`/proc/self/mountinfo`: each mount's device, the folder of that device it shows, and
//! where).

use std::path::{Path, PathBuf};

/// One line of the mount table: which device, which of its folders, mounted where.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mounted {
    device: String,
    root: PathBuf,
    point: PathBuf,
}

/// A path as `/proc/self/mountinfo` writes it (`\040`-style escapes), as a path. Also read
/// by `mounts.rs`.
pub(crate) fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(code) = field
                .get(i + 1..i + 4)
                .and_then(|digits| u8::from_str_radix(digits, 8).ok())
        {
            out.push(code);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    PathBuf::from(String::from_utf8_lossy(&out).into_owned())
}

fn parse(mountinfo: &str) -> Vec<Mounted> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ').skip(2);
            Some(Mounted {
                device: fields.next()?.to_string(),
                root: unescape(fields.next()?),
                point: unescape(fields.next()?),
            })
        })
        .collect()
}

/// The other names of `path` in the mount table `mountinfo`: the mount showing it (the last
/// one, at the longest mount point, that holds it) gives its place on its device; every other
/// mount of that device showing that place gives a name, and so does every mount of a
/// folder or file inside it (a key bind-mounted at `/srv/key` is a name of part of `~/.ssh`:
/// the whole mount is hidden with it).
fn aliases_in(mountinfo: &str, path: &Path) -> Vec<PathBuf> {
    let table = parse(mountinfo);
    let Some(home) = table
        .iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
    else {
        return Vec::new();
    };
    let Ok(below) = path.strip_prefix(&home.point) else {
        return Vec::new();
    };
    let on_device = home.root.join(below);
    let mut out: Vec<PathBuf> = Vec::new();
    for other in table.iter().filter(|m| m.device == home.device) {
        let alias = match on_device.strip_prefix(&other.root) {
            Ok(rest) => other.point.join(rest),
            Err(_) if other.root.starts_with(&on_device) => other.point.clone(),
            Err(_) => continue,
        };
        if alias != path && !out.contains(&alias) {
            out.push(alias);
        }
    }
    out
}

/// The other names of each of `paths` on this machine now.
pub fn of(paths: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    of_in(&mountinfo, paths)
}

/// The other names of each of `paths` in the mount table `mountinfo`, none of `paths`.
pub(crate) fn of_in(mountinfo: &str, paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for path in paths {
        for alias in aliases_in(mountinfo, path) {
            if !paths.contains(&alias) && !out.contains(&alias) {
                out.push(alias);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 254:1 /home /mnt/homes rw,relatime shared:1 - ext4 /dev/vda rw
31 22 254:1 /home/u /srv/u\\040copy rw,relatime shared:1 - ext4 /dev/vda rw
32 22 254:2 / /data rw,relatime shared:2 - ext4 /dev/vdb rw
33 32 254:2 /keys /home/u/.ssh rw,relatime shared:2 - ext4 /dev/vdb rw
34 22 0:40 / /tmp rw shared:3 - tmpfs tmpfs rw
35 22 254:1 /home/u/.aws/sso /mnt/sso rw,relatime shared:1 - ext4 /dev/vda rw
36 22 254:2 /keys/id_rsa /srv/key rw,relatime shared:2 - ext4 /dev/vdb rw
37 22 254:1 /home/u/.awsome /mnt/not-aws rw,relatime shared:1 - ext4 /dev/vda rw
";

    #[test]
    fn a_path_is_named_again_wherever_its_folder_is_mounted() {
        let aliases = aliases_in(TABLE, Path::new("/home/u/.netrc"));
        assert_eq!(
            aliases,
            [
                PathBuf::from("/mnt/homes/u/.netrc"),
                PathBuf::from("/srv/u copy/.netrc")
            ]
        );
    }

    #[test]
    fn the_names_of_several_places_are_each_given_once_and_never_one_of_them() {
        let paths = [
            PathBuf::from("/home/u/.netrc"),
            PathBuf::from("/mnt/homes/u/.netrc"),
            PathBuf::from("/home/u/.ssh"),
        ];
        let names = of_in(TABLE, &paths);
        assert_eq!(
            names,
            [
                PathBuf::from("/srv/u copy/.netrc"),
                PathBuf::from("/data/keys"),
                PathBuf::from("/srv/key")
            ]
        );
        assert!(of_in(TABLE, &[]).is_empty());
    }

    #[test]
    fn a_bind_mount_on_this_machine_is_a_second_name() {
        // Mounting needs root (CI runs as root).
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid() == 0
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let (place, second) = (dir.path().join("place"), dir.path().join("second"));
        for folder in [&place, &second] {
            std::fs::create_dir(folder).expect("mkdir");
        }
        let mounted = root
            && std::process::Command::new("mount")
                .arg("--bind")
                .arg(&place)
                .arg(&second)
                .status()
                .is_ok_and(|status| status.success());
        let names = of(&[place.join("secret")]);
        if mounted {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&second)
                .status();
            assert!(names.contains(&second.join("secret")), "{names:?}");
        }
    }

    #[test]
    fn a_folder_or_a_file_inside_a_place_mounted_elsewhere_is_a_name_of_it() {
        // ~/.aws/sso bind-mounted at /mnt/sso; the key inside ~/.ssh (another device's
        // /keys) at /srv/key; a folder whose name merely begins like the place is not one.
        let aws = aliases_in(TABLE, Path::new("/home/u/.aws"));
        assert!(aws.contains(&PathBuf::from("/mnt/sso")), "{aws:?}");
        assert!(!aws.contains(&PathBuf::from("/mnt/not-aws")), "{aws:?}");
        let ssh = aliases_in(TABLE, Path::new("/home/u/.ssh"));
        assert!(ssh.contains(&PathBuf::from("/srv/key")), "{ssh:?}");
        assert!(ssh.contains(&PathBuf::from("/data/keys")), "{ssh:?}");
    }

    #[test]
    fn a_mount_on_top_decides_which_device_a_path_is_on() {
        // ~/.ssh is another device's /keys, also seen at /data/keys.
        assert_eq!(
            aliases_in(TABLE, Path::new("/home/u/.ssh/id_rsa")),
            [
                PathBuf::from("/data/keys/id_rsa"),
                PathBuf::from("/srv/key")
            ]
        );
        assert!(aliases_in(TABLE, Path::new("/tmp/x")).is_empty());
        assert!(aliases_in("garbage\n", Path::new("/home/u/.netrc")).is_empty());
    }
}
