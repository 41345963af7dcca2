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
//!
//! Files are created with mode 0666 less the process umask (0644 under the
//! usual umask 022), as every Unix tool creates them: a node_exporter that
//! is not root reads an exported `.prom`, a colleague reads a shared report.
//! The temporary file is created with that mode too (tempfile's own default,
//! 0600, would survive the rename).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
    #[error(
        "cannot write {path}: the directory {dir} does not exist; create it or give another path"
    )]
    NoDir { path: PathBuf, dir: PathBuf },
}

/// The mode new files are created with, before the umask.
const FILE_MODE: u32 = 0o666;

fn write_error(path: &Path) -> impl Fn(io::Error) -> OutputError + '_ {
    move |error| match error.raw_os_error() {
        Some(libc::EEXIST) => OutputError::Exists {
            path: path.to_path_buf(),
        },
        Some(libc::ELOOP) => OutputError::Symlink {
            path: path.to_path_buf(),
        },
        // Only when the directory is really missing: /proc exists and
        // refuses a new entry with ENOENT all the same.
        _ if error.kind() == io::ErrorKind::NotFound && !parent(path).is_dir() => {
            OutputError::NoDir {
                path: path.to_path_buf(),
                dir: parent(path).to_path_buf(),
            }
        }
        // tempfile's errors name the temporary file (`.leakwatch-Qlpc5M`);
        // the user gave `path`, so only the cause is kept.
        Some(code) => OutputError::Write {
            path: path.to_path_buf(),
            error: io::Error::from_raw_os_error(code),
        },
        None => OutputError::Write {
            path: path.to_path_buf(),
            error: errno_of(error.kind()).map_or_else(
                || io::Error::from(error.kind()),
                io::Error::from_raw_os_error,
            ),
        },
    }
}

/// The errno of the kinds tempfile wraps, for the system's own wording
/// ("Permission denied (os error 13)").
fn errno_of(kind: io::ErrorKind) -> Option<i32> {
    match kind {
        io::ErrorKind::PermissionDenied => Some(libc::EACCES),
        io::ErrorKind::ReadOnlyFilesystem => Some(libc::EROFS),
        io::ErrorKind::StorageFull => Some(libc::ENOSPC),
        io::ErrorKind::NotADirectory => Some(libc::ENOTDIR),
        _ => None,
    }
}

/// The directory a file is written in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A temporary file in `dir` created as a final file would be (the mode
/// less the umask), exclusively, under a random name.
fn temp_in(dir: &Path, prefix: &str) -> io::Result<tempfile::NamedTempFile> {
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(fs::Permissions::from_mode(FILE_MODE))
        .tempfile_in(dir)
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

/// Creates `dir` itself (its parent must exist): true if this call made it,
/// false if it was there already, so that of two sessions choosing the same
/// name one at a time only one gets it.
pub fn claim_dir(dir: &Path) -> Result<bool, OutputError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(write_error(dir)(e)),
    }
}

/// Creates a new file for appending (samples.csv): never an existing file,
/// never through a link.
pub fn create_new(path: &Path) -> Result<File, OutputError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(FILE_MODE)
        .open(path)
        .map_err(write_error(path))
}

/// Writes `bytes` as `path` through a temporary file in the same directory
/// and a rename: the whole file or nothing, and a link at `path` is
/// replaced, not followed. The data reach the disk before the rename
/// (`fdatasync`), so a crash leaves the old file or the new one: for files
/// nothing else can rebuild (a baseline, JUnit XML, a man page).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    replace(path, bytes, true)
}

/// As `write_atomic`, without waiting for the disk: for the reports of an
/// output directory, which `leakwatch report DIR` rebuilds from its
/// samples.csv (itself appended without a sync, sample by sample). Readers
/// still see the whole file or none; a sync per report file would cost
/// milliseconds of waiting each (measured:
/// docs/performance.md#report-files-without-a-sync).
pub fn write_report(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    replace(path, bytes, false)
}

fn replace(path: &Path, bytes: &[u8], sync: bool) -> Result<(), OutputError> {
    let dir = parent(path);
    let err = write_error(path);
    let mut tmp = temp_in(dir, ".leakwatch-").map_err(&err)?;
    tmp.write_all(bytes).map_err(&err)?;
    if sync {
        tmp.as_file().sync_data().map_err(&err)?;
    }
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

/// Copies samples.csv to `to` (`report --out`), through a new file as
/// `create_new` makes one. Nothing to do when `to` is `from` itself or
/// already holds the same rows (a second `report --out` into the same
/// directory); a different samples.csv there is never overwritten.
pub fn copy_samples(from: &Path, to: &Path) -> Result<(), OutputError> {
    if fs::symlink_metadata(to).is_ok() {
        if same_file_or_content(from, to).map_err(write_error(to))? {
            return Ok(());
        }
        return Err(OutputError::Exists {
            path: to.to_path_buf(),
        });
    }
    let mut source = File::open(from).map_err(write_error(from))?;
    let mut target = create_new(to)?;
    if let Err(e) = io::copy(&mut source, &mut target) {
        // A partial copy (a full disk) would block every later `report`.
        drop(target);
        let _ = fs::remove_file(to);
        return Err(write_error(to)(e));
    }
    Ok(())
}

/// The same file (device and inode), or two files with the same bytes.
fn same_file_or_content(a: &Path, b: &Path) -> io::Result<bool> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let (ma, mb) = (fs::metadata(a)?, fs::symlink_metadata(b)?);
    if ma.dev() == mb.dev() && ma.ino() == mb.ino() {
        return Ok(true);
    }
    if !mb.is_file() || ma.len() != mb.len() {
        return Ok(false);
    }
    let (mut fa, mut fb) = (io::BufReader::new(File::open(a)?), File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// Checks, before a session starts, that a file it will write at the end
/// (`--junit`, `--save-baseline`) can be written: not a link, in a
/// directory that exists and takes a new file.
pub fn check_writable(path: &Path) -> Result<(), OutputError> {
    refuse_symlink(path)?;
    let dir = parent(path);
    temp_in(dir, ".leakwatch-check-")
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
