//! Where `--native-sites` finds the shim: `LEAKWATCH_SHIM`, else
//! `libleakwatch_shim.so` beside the leakwatch binary (a build tree: the
//! tests rebuild it there), else the copy built into leakwatch by
//! `build.rs`, written out once per user and shim version.
//!
//! The written copy lives in a per-user directory of the temporary
//! directory, `leakwatch-shim-<euid>/libleakwatch_shim-<hash>.so`, not in
//! the session's private directory, because:
//! - the private directory is 0700 by design (it holds the endpoints), and
//!   in `attach` mode ld.so opens the shim with the *target's* credentials:
//!   root attaching to another user's process needs a file that user can
//!   read (directory 0755, file 0644; the shim is no secret);
//! - the shim stays mapped in an attached process for its life: a file
//!   removed at exit would show as `(deleted)` in its maps;
//! - and it is written once per version, not once per session.
//!
//! Nobody else may write there: a planted `.so` would run as the target. The
//! directory must be ours (lstat: a real directory, owned by our euid, not
//! group- or other-writable) or leakwatch refuses; the file is used only if
//! it is a regular file of ours, not writable by others, with exactly the
//! embedded bytes (opened without following a link), else a fresh copy is
//! written to a temporary name and renamed over it. The hash in the name
//! keeps versions apart; the rename makes concurrent sessions safe (each
//! sees a whole file, old or new, with the same bytes).

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{ENV_SHIM, NativeSitesError, SHIM_FILE};

/// The shim `build.rs` built into this binary; empty when it could not.
static EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libleakwatch_shim.so"));

/// The shim to preload, as an absolute path (ld.so searches a relative one).
pub fn find() -> Result<PathBuf, NativeSitesError> {
    if let Some(path) = std::env::var_os(ENV_SHIM).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return fs::canonicalize(&path)
            .ok()
            .filter(|p| p.is_file())
            .ok_or(NativeSitesError::ShimOverride { path });
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(SHIM_FILE)))
        .unwrap_or_else(|| PathBuf::from(SHIM_FILE));
    if beside.is_file() {
        if let Ok(path) = fs::canonicalize(&beside) {
            return Ok(path);
        }
    }
    if EMBEDDED.is_empty() {
        return Err(NativeSitesError::ShimMissing { beside });
    }
    write_out(&std::env::temp_dir(), EMBEDDED)
}

/// `bytes` as `<parent>/leakwatch-shim-<euid>/libleakwatch_shim-<hash>.so`,
/// written unless that file holds them already (see the module's doc).
pub fn write_out(parent: &Path, bytes: &[u8]) -> Result<PathBuf, NativeSitesError> {
    let euid = nix::unistd::geteuid().as_raw();
    let fail = |path: &Path, why: String| NativeSitesError::ShimCache {
        path: path.to_path_buf(),
        why,
    };
    let parent =
        fs::canonicalize(parent).map_err(|e| fail(parent, format!("cannot resolve it: {e}")))?;
    let dir = parent.join(format!("leakwatch-shim-{euid}"));
    match fs::DirBuilder::new().mode(0o755).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail(&dir, format!("cannot create it: {e}"))),
    }
    let meta = fs::symlink_metadata(&dir).map_err(|e| fail(&dir, e.to_string()))?;
    if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o022 != 0 {
        return Err(fail(
            &dir,
            format!(
                "it is not a directory of uid {euid} that only its owner may write (a {}, owner \
                 uid {}, mode {:o}): another user could plant a library there; remove it",
                if meta.file_type().is_symlink() {
                    "symbolic link"
                } else if meta.is_dir() {
                    "directory"
                } else {
                    "file"
                },
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    // The umask may have narrowed it; readable by all for attach (see above).
    if meta.mode() & 0o777 != 0o755 {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
            .map_err(|e| fail(&dir, format!("cannot make it readable: {e}")))?;
    }
    let path = dir.join(format!("libleakwatch_shim-{:016x}.so", fnv1a(bytes)));
    if holds(&path, bytes, euid) {
        return Ok(path);
    }
    let written = (|| -> io::Result<()> {
        let mut tmp = tempfile::Builder::new()
            .prefix(".libleakwatch_shim-")
            .tempfile_in(&dir)?;
        tmp.write_all(bytes)?;
        tmp.as_file()
            .set_permissions(fs::Permissions::from_mode(0o644))?;
        tmp.as_file().sync_all()?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    })();
    written.map_err(|e| fail(&path, format!("cannot write it: {e}")))?;
    Ok(path)
}

/// Whether `path` is a regular file of `euid`'s, writable by nobody else,
/// with exactly `bytes` (a link is not followed: it is replaced).
fn holds(path: &Path, bytes: &[u8], euid: u32) -> bool {
    let Ok(mut file) = fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    else {
        return false;
    };
    let Ok(meta) = file.metadata() else {
        return false;
    };
    if !meta.is_file()
        || meta.uid() != euid
        || meta.mode() & 0o022 != 0
        || meta.len() != bytes.len() as u64
    {
        return false;
    }
    let mut have = Vec::with_capacity(bytes.len());
    file.read_to_end(&mut have).is_ok() && have == bytes
}

/// FNV-1a, 64 bits: names versions apart (the bytes are compared anyway).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn the_copy_is_written_once_readable_by_all_and_named_by_its_bytes() {
        let parent = tempfile::tempdir().unwrap();
        let a = write_out(parent.path(), b"shim one").unwrap();
        assert!(a.is_absolute(), "{}", a.display());
        assert_eq!(fs::read(&a).unwrap(), b"shim one");
        assert_eq!(mode(&a), 0o644);
        assert_eq!(mode(a.parent().unwrap()), 0o755);
        let inode = fs::metadata(&a).unwrap().ino();
        assert_eq!(write_out(parent.path(), b"shim one").unwrap(), a);
        assert_eq!(fs::metadata(&a).unwrap().ino(), inode, "not rewritten");
        let b = write_out(parent.path(), b"shim two").unwrap();
        assert_ne!(a, b);
        assert_eq!(fs::read(&a).unwrap(), b"shim one", "versions never collide");
        // Nothing left behind but the two copies.
        assert_eq!(fs::read_dir(a.parent().unwrap()).unwrap().count(), 2);
    }

    #[test]
    fn a_changed_copy_or_a_link_in_its_place_is_replaced() {
        let parent = tempfile::tempdir().unwrap();
        let path = write_out(parent.path(), b"the shim").unwrap();
        fs::write(&path, b"the shix").unwrap();
        assert_eq!(write_out(parent.path(), b"the shim").unwrap(), path);
        assert_eq!(fs::read(&path).unwrap(), b"the shim");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        write_out(parent.path(), b"the shim").unwrap();
        assert_eq!(mode(&path), 0o644);
        let elsewhere = parent.path().join("elsewhere.so");
        fs::write(&elsewhere, b"the shim").unwrap();
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        write_out(parent.path(), b"the shim").unwrap();
        assert!(fs::symlink_metadata(&path).unwrap().is_file(), "not a link");
    }

    #[test]
    fn a_directory_another_could_write_or_a_link_is_refused() {
        let euid = nix::unistd::geteuid().as_raw();
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join(format!("leakwatch-shim-{euid}"));
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let err = write_out(parent.path(), b"shim").unwrap_err().to_string();
        assert!(
            err.contains("mode 777") && err.contains("remove it"),
            "{err}"
        );
        fs::remove_dir(&dir).unwrap();
        let theirs = parent.path().join("theirs");
        fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::symlink(&theirs, &dir).unwrap();
        let err = write_out(parent.path(), b"shim").unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(fs::read_dir(&theirs).unwrap().count(), 0);
    }

    #[test]
    fn fnv1a_matches_its_reference_values() {
        // From the FNV reference test vectors (Fowler, Noll, Vo).
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
