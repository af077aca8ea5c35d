//! The other names a path has through mounts: the same folder mounted at a second place
//! (a home bind-mounted under `/mnt`, a container's volume), or shown by an overlay whose
//! layer it lies in (`lowerdir=$HOME`, see `overlays.rs`), reaches the same files, so a
//! hidden place is hidden at each of its names, and at the names of those names (an overlay
//! of a bind mount). Read from the kernel's mount table (`/proc/self/mountinfo`: each
//! mount's device, the folder of that device it shows, where, and an overlay's layers).

use crate::mountinfo_path::mountinfo_path;
use std::path::{Path, PathBuf};

/// One line of the mount table: which device, which of its folders, mounted where, and the
/// folders it shows besides (an overlay's layers).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mounted {
    device: String,
    root: PathBuf,
    point: PathBuf,
    layers: Vec<PathBuf>,
}

/// How many times a name is named again (an overlay of a bind mount of the home, mounted
/// again): past that, a table is built to be slow, not to be used.
const NAME_ROUNDS: usize = 4;

fn parse(mountinfo: &str) -> Vec<Mounted> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ').skip(2);
            Some(Mounted {
                device: fields.next()?.to_string(),
                root: mountinfo_path(fields.next()?),
                point: mountinfo_path(fields.next()?),
                layers: crate::overlays::layers(line),
            })
        })
        .collect()
}

/// The other names of `path` in the mount table `mountinfo`: the mount showing it (the last
/// one, at the longest mount point, that holds it) gives its place on its device; every other
/// mount of that device showing that place gives a name, and so does every mount of a
/// folder or file inside it (a key bind-mounted at `/srv/key` is a name of part of `~/.ssh`:
/// the whole mount is hidden with it).
#[cfg(test)]
fn aliases_in(mountinfo: &str, path: &Path) -> Vec<PathBuf> {
    let table = parse(mountinfo);
    let mut out = bound_names(&table, path);
    for name in layered_names(&table, path) {
        if name != path && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The names `path` has through the mounts of its device (bind mounts).
fn bound_names(table: &[Mounted], path: &Path) -> Vec<PathBuf> {
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

/// The names `path` has through overlays whose layer holds it (the mount point and its
/// place in the layer), or lies inside it (the whole mount shows part of it) — but for the
/// root of the file system: a container run by rootless Podman (toolbox, distrobox) has its
/// image's layers under `~/.local/share/containers`, a hidden store, and hiding its whole
/// root would leave a command nothing to run.
/// The same name may come twice, and `path` itself (an overlay mounted on its own lower
/// layer): [`of_in`] keeps each new name once.
fn layered_names(table: &[Mounted], path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for mount in table {
        for layer in &mount.layers {
            match path.strip_prefix(layer) {
                Ok(rest) => out.push(mount.point.join(rest)),
                Err(_) if layer.starts_with(path) && mount.point != Path::new("/") => {
                    out.push(mount.point.clone());
                }
                Err(_) => {}
            }
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
/// Names of names are followed (a bind mount of an overlay of the home) up to
/// [`NAME_ROUNDS`] deep.
pub(crate) fn of_in(mountinfo: &str, paths: &[PathBuf]) -> Vec<PathBuf> {
    let table = parse(mountinfo);
    let mut out: Vec<PathBuf> = Vec::new();
    let mut named: Vec<PathBuf> = paths.to_vec();
    for _ in 0..NAME_ROUNDS {
        let mut found: Vec<PathBuf> = Vec::new();
        for path in &named {
            let names = bound_names(&table, path)
                .into_iter()
                .chain(layered_names(&table, path));
            for alias in names {
                // A name inside a place already named is hidden with it.
                let known = |place: &PathBuf| alias.starts_with(place);
                if !paths.iter().any(known) && !out.iter().any(known) && !found.contains(&alias) {
                    found.push(alias);
                }
            }
        }
        if found.is_empty() {
            break;
        }
        out.extend(found.iter().cloned());
        named = found;
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

    const OVERLAYS: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:50 / /mnt/ovl rw,relatime - overlay overlay rw,lowerdir=/srv/base:/home/u,upperdir=/var/up,workdir=/var/work,uuid=on
41 22 0:51 / /mnt/part rw,relatime - overlay overlay rw,lowerdir=/home/u/.aws/sso,upperdir=/var/up2,workdir=/var/w2
42 22 0:50 / /srv/again rw,relatime - overlay overlay rw,lowerdir=/srv/base:/home/u,upperdir=/var/up,workdir=/var/work
43 22 254:1 /home /mnt/homes rw,relatime shared:1 - ext4 /dev/vda rw
44 22 0:52 / /mnt/of\\040bind rw,relatime - overlay overlay rw,lowerdir=/mnt/homes/u,upperdir=/var/up3,workdir=/var/w3
45 22 0:53 / /mnt/upper rw,relatime - overlay overlay rw,lowerdir=/srv/base,upperdir=/home,workdir=/var/w4
46 22 0:54 / /mnt/relative rw,relatime - overlay overlay rw,lowerdir=u,upperdir=up,workdir=w
47 22 0:55 / /mnt/other rw,relatime - overlay overlay rw,lowerdir=/home/u/.awsome,upperdir=/var/u5,workdir=/var/w5
";

    #[test]
    fn an_overlay_whose_layer_holds_a_hidden_place_names_it_at_its_mount_point() {
        let names = of_in(OVERLAYS, &[PathBuf::from("/home/u/.aws/credentials")]);
        for expected in [
            "/mnt/ovl/.aws/credentials",     // the home as a lower layer
            "/srv/again/.aws/credentials",   // that overlay mounted again
            "/mnt/homes/u/.aws/credentials", // a bind mount of /home
            "/mnt/of bind/.aws/credentials", // an overlay of that bind mount
            "/mnt/upper/u/.aws/credentials", // /home as the upper layer
        ] {
            assert!(
                names.contains(&PathBuf::from(expected)),
                "{expected}: {names:?}"
            );
        }
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with("/mnt/relative") || n.starts_with("/mnt/other")),
            "{names:?}"
        );
    }

    #[test]
    fn an_overlay_of_a_folder_inside_a_hidden_place_is_a_name_of_it_whole() {
        let names = of_in(OVERLAYS, &[PathBuf::from("/home/u/.aws")]);
        assert!(names.contains(&PathBuf::from("/mnt/part")), "{names:?}");
        assert!(names.contains(&PathBuf::from("/mnt/ovl/.aws")), "{names:?}");
        assert!(!names.contains(&PathBuf::from("/mnt/other")), "{names:?}");
        // A place outside every layer has no overlay name.
        assert!(of_in(OVERLAYS, &[PathBuf::from("/etc/shadow")]).is_empty());
    }

    #[test]
    fn a_containers_root_made_of_a_hidden_stores_layers_is_not_hidden_whole() {
        // toolbox: / is an overlay of image layers kept in ~/.local/share/containers.
        let table = "\
22 1 0:60 / / rw - overlay overlay rw,lowerdir=/home/u/.local/share/containers/storage/overlay/l/AB,upperdir=/home/u/.local/share/containers/storage/overlay/x/diff,workdir=/w
23 22 0:61 / /mnt/img rw - overlay overlay rw,lowerdir=/home/u/.local/share/containers/storage/overlay/l/AB,upperdir=/v,workdir=/w2
";
        let names = of_in(table, &[PathBuf::from("/home/u/.local/share/containers")]);
        assert_eq!(names, [PathBuf::from("/mnt/img")]);
    }

    #[test]
    fn an_overlay_mounted_on_its_own_lower_layer_names_nothing_new() {
        let table = "\
22 1 254:1 / / rw - ext4 /dev/vda rw
40 22 0:50 / /home/u rw - overlay overlay rw,lowerdir=/home/u,upperdir=/v,workdir=/w
";
        assert!(of_in(table, &[PathBuf::from("/home/u/.netrc")]).is_empty());
    }

    #[test]
    fn names_of_names_end_however_the_mounts_loop() {
        // Two overlays, each with the other's mount point as a layer.
        let table = "\
22 1 254:1 / / rw - ext4 /dev/vda rw
40 22 0:50 / /a rw - overlay overlay rw,lowerdir=/b:/home/u,upperdir=/v1,workdir=/w1
41 22 0:51 / /b rw - overlay overlay rw,lowerdir=/a,upperdir=/v2,workdir=/w2
";
        let names = of_in(table, &[PathBuf::from("/home/u/.netrc")]);
        assert!(names.contains(&PathBuf::from("/a/.netrc")), "{names:?}");
        assert!(names.contains(&PathBuf::from("/b/.netrc")), "{names:?}");
        assert!(names.len() <= 2 * NAME_ROUNDS, "{names:?}");
    }
}
