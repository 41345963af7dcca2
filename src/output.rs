//! Every file leakwatch writes goes through here: created in its directory
//! without following symlinks, so a report directory from a stranger (a CI
//! artifact with a planted `report.md → ~/.bashrc`) cannot make leakwatch
//! write anywhere else.
//!
//! New files are created exclusively (`O_CREAT|O_EXCL`: a link already at
//! the name is refused, dangling or not). Reports are written to a fresh
//! temporary file with a random name in the same directory (tempfile's
//! `O_EXCL` creation), then renamed over the final name: `rename` replaces
//! a symlink at that name instead of writing through it, a reader never
//! sees half a file, and a failed write (a full disk) leaves nothing.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot write {path}: {error}")]
    Write { path: PathBuf, error: io::Error },
    #[error(
        "{path} is a symbolic link; leakwatch writes only real files and directories \
         (give the path it points to, or another one)"
    )]
    Symlink { path: PathBuf },
    #[error("{path} already exists; leakwatch does not overwrite it (remove it or choose another)")]
    Exists { path: PathBuf },
}

fn write_error(path: &Path) -> impl Fn(io::Error) -> OutputError + '_ {
    move |error| match error.raw_os_error() {
        Some(libc::EEXIST) => OutputError::Exists {
            path: path.to_path_buf(),
        },
        Some(libc::ELOOP) => OutputError::Symlink {
            path: path.to_path_buf(),
        },
        _ => OutputError::Write {
            path: path.to_path_buf(),
            error,
        },
    }
}

fn is_symlink(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Refuses a path that is a symlink (an output directory, `--junit FILE`).
pub fn refuse_symlink(path: &Path) -> Result<(), OutputError> {
    if is_symlink(path) {
        return Err(OutputError::Symlink {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Creates the output directory (and its parents) unless it exists; it must
/// not be a symlink.
pub fn create_dir(dir: &Path) -> Result<(), OutputError> {
    refuse_symlink(dir)?;
    fs::create_dir_all(dir).map_err(write_error(dir))
}

/// Creates a new file for appending (samples.csv): never an existing file,
/// never through a link.
pub fn create_new(path: &Path) -> Result<File, OutputError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
        .map_err(write_error(path))
}

/// Writes `bytes` as `path` through a temporary file in the same directory
/// and a rename: the whole file or nothing, and a link at `path` is
/// replaced, not followed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let err = write_error(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(".leakwatch-")
        .tempfile_in(dir)
        .map_err(&err)?;
    tmp.write_all(bytes).map_err(&err)?;
    tmp.as_file().sync_data().map_err(&err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

/// Checks, before a session starts, that a file it will write at the end
/// (`--junit`, `--save-baseline`) can be written: not a link, in a
/// directory that exists and takes a new file.
pub fn check_writable(path: &Path) -> Result<(), OutputError> {
    refuse_symlink(path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".leakwatch-check-")
        .tempfile_in(dir)
        .map(drop)
        .map_err(write_error(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_planted_link_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("bashrc");
        fs::write(&victim, "mine").unwrap();
        let report = dir.path().join("report.md");
        symlink(&victim, &report).unwrap();
        write_atomic(&report, b"# leakwatch report").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "mine");
        assert!(!is_symlink(&report));
        assert_eq!(fs::read_to_string(&report).unwrap(), "# leakwatch report");
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn new_files_refuse_links_dangling_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("authorized_keys");
        let samples = dir.path().join("samples.csv");
        symlink(&victim, &samples).unwrap();
        assert!(matches!(
            create_new(&samples),
            Err(OutputError::Exists { .. })
        ));
        assert!(!victim.exists());
        let fresh = dir.path().join("fresh.csv");
        create_new(&fresh).unwrap();
        assert!(matches!(
            create_new(&fresh),
            Err(OutputError::Exists { .. })
        ));
    }

    #[test]
    fn linked_directories_and_unwritable_paths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = dir.path().join("out");
        symlink(&real, &link).unwrap();
        assert!(matches!(
            create_dir(&link),
            Err(OutputError::Symlink { .. })
        ));
        assert!(check_writable(&dir.path().join("no/such/dir/junit.xml")).is_err());
        assert!(check_writable(&dir.path().join("junit.xml")).is_ok());
        assert!(!dir.path().join("junit.xml").exists());
    }
}
