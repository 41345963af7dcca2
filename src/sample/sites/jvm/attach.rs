//! HotSpot's dynamic attach, spoken by leakwatch itself as `jcmd` and
//! `jattach` speak it (OpenJDK `attachListener_linux.cpp`,
//! `VirtualMachineImpl.java` of `jdk.attach`):
//!
//! 1. The JVM listens on the Unix socket `/tmp/.java_pid<PID>` once its
//!    attach listener has started; PID is the process's id in its own
//!    namespace (the last `NSpid` of `/proc/PID/status`), `/tmp` its own
//!    (`/proc/PID/root/tmp`: containers included).
//! 2. If the socket is not there, the listener is started by a file
//!    `.attach_pid<PID>` in the JVM's working directory (or its `/tmp`),
//!    owned by the JVM's user, and a SIGQUIT: the JVM's signal dispatcher
//!    sees the file and starts the listener instead of printing a thread
//!    dump. A JVM that does not handle SIGQUIT (`-Xrs`, or not started
//!    yet) would be killed by it: refused, never signalled.
//! 3. A request is `1\0` (the protocol version), the command, and three
//!    arguments, each NUL-terminated; `jcmd <line>` is command `jcmd` with
//!    the line as its first argument. The JVM answers its result code as
//!    text and a newline, then the command's output, and closes.
//!
//! The JVM checks that the client runs as its own user or as root; a
//! leakwatch of another user is refused by the kernel's permissions first.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::sample::procfs::ProcRoot;

/// How long the JVM may take to start its attach listener after SIGQUIT
/// (jattach waits about 6 s; a JVM busy in a long collection takes a while).
const LISTENER_WAIT: Duration = Duration::from_secs(6);
/// How often the socket is looked for while waiting.
const POLL: Duration = Duration::from_millis(20);
/// The most output one request may return: a class histogram of a large
/// application is a few MiB (one line of ~100 bytes per loaded class).
pub const MAX_ANSWER: u64 = 64 << 20;

/// Why a request to a JVM got no answer.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("its status could not be read ({0})")]
    Status(std::io::Error),
    #[error(
        "it does not handle SIGQUIT (started with -Xrs, or still starting), so its attach \
         listener cannot be started without killing it"
    )]
    NoSigquit,
    #[error(
        "its attach listener did not start within {0:?} of SIGQUIT (started with \
         -XX:+DisableAttachMechanism, or a /tmp leakwatch cannot write)"
    )]
    NoListener(Duration),
    #[error("the trigger file {0} could not be created ({1})")]
    Trigger(PathBuf, std::io::Error),
    #[error("its attach socket {0} refused the connection ({1})")]
    Connect(PathBuf, std::io::Error),
    #[error("the request failed ({0})")]
    Io(std::io::Error),
    #[error("it answered nothing within {0:?}")]
    Timeout(Duration),
    #[error("its answer is more than {} MiB", MAX_ANSWER >> 20)]
    TooLong,
    #[error("its answer does not begin with a result code: {0:?}")]
    Garbled(String),
    #[error("it refused the command (result {code}): {message}")]
    Refused { code: i64, message: String },
}

/// What `/proc/PID/status` says about attaching to a JVM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// Its pid in its own namespace (the last field of `NSpid`).
    pub ns_pid: u32,
    /// Its effective user and group.
    pub uid: u32,
    pub gid: u32,
    /// It handles SIGQUIT (bit 2 of `SigCgt`).
    pub catches_sigquit: bool,
}

/// Reads `Identity` from status text; `None` when a field is missing.
pub fn identity(status: &str, pid: u32) -> Option<Identity> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
    };
    let nth = |name: &str, n: usize| -> Option<u32> {
        field(name)?.split_ascii_whitespace().nth(n)?.parse().ok()
    };
    let ns_pid = match field("NSpid") {
        Some(v) => v.split_ascii_whitespace().last()?.parse().ok()?,
        None => pid,
    };
    let sigcgt = u64::from_str_radix(field("SigCgt")?.trim(), 16).ok()?;
    Some(Identity {
        ns_pid,
        uid: nth("Uid", 1)?,
        gid: nth("Gid", 1)?,
        catches_sigquit: sigcgt & (1 << (libc::SIGQUIT - 1)) != 0,
    })
}

/// One JVM leakwatch talks to.
#[derive(Debug, Clone)]
pub struct Jvm {
    pub pid: u32,
    root: ProcRoot,
}

impl Jvm {
    pub fn new(root: ProcRoot, pid: u32) -> Self {
        Jvm { pid, root }
    }

    fn identity(&self) -> Result<Identity, AttachError> {
        let text = std::fs::read_to_string(self.root.path(self.pid, "status"))
            .map_err(AttachError::Status)?;
        identity(&text, self.pid).ok_or_else(|| {
            AttachError::Status(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "no NSpid, Uid, Gid or SigCgt line",
            ))
        })
    }

    /// The socket, as leakwatch reaches it: through the JVM's own root.
    fn socket(&self, id: &Identity) -> PathBuf {
        self.root
            .path(self.pid, "root")
            .join(format!("tmp/.java_pid{}", id.ns_pid))
    }

    /// Runs `jcmd <line>` (e.g. `GC.class_histogram`) and returns its
    /// output, waiting at most `timeout` for the answer.
    pub fn jcmd(&self, line: &str, timeout: Duration) -> Result<String, AttachError> {
        let id = self.identity()?;
        let socket = self.socket(&id);
        if !is_socket(&socket) {
            self.start_listener(&id, &socket)?;
        }
        let mut stream =
            super::super::connect(&socket).map_err(|e| AttachError::Connect(socket.clone(), e))?;
        stream
            .set_write_timeout(Some(timeout))
            .and_then(|()| stream.set_read_timeout(Some(timeout)))
            .map_err(AttachError::Io)?;
        stream
            .write_all(&request("jcmd", &[line, "", ""]))
            .map_err(AttachError::Io)?;
        let mut answer = Vec::new();
        let read = (&mut stream).take(MAX_ANSWER + 1).read_to_end(&mut answer);
        match read {
            Ok(_) if answer.len() as u64 > MAX_ANSWER => Err(AttachError::TooLong),
            Ok(_) => parse_answer(&answer),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(AttachError::Timeout(timeout))
            }
            Err(e) => Err(AttachError::Io(e)),
        }
    }

    /// The trigger file and SIGQUIT, then waits for the socket; the file is
    /// removed whatever happens.
    fn start_listener(&self, id: &Identity, socket: &Path) -> Result<(), AttachError> {
        if !id.catches_sigquit {
            return Err(AttachError::NoSigquit);
        }
        let name = format!(".attach_pid{}", id.ns_pid);
        let cwd = self.root.path(self.pid, "cwd").join(&name);
        let tmp = self.root.path(self.pid, "root").join("tmp").join(&name);
        let trigger = match create_trigger(&cwd, id) {
            Ok(t) => t,
            Err(_) => create_trigger(&tmp, id).map_err(|e| AttachError::Trigger(tmp, e))?,
        };
        // SAFETY: plain syscall; the JVM handles SIGQUIT (checked above).
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGQUIT) };
        if rc != 0 {
            return Err(AttachError::Io(std::io::Error::last_os_error()));
        }
        let started = Instant::now();
        while started.elapsed() < LISTENER_WAIT {
            if is_socket(socket) {
                drop(trigger);
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
        Err(AttachError::NoListener(LISTENER_WAIT))
    }
}

/// The trigger file, removed when dropped.
struct Trigger(PathBuf);

impl Drop for Trigger {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Creates the trigger file, owned by the JVM's user (HotSpot ignores one
/// owned by anybody else but root).
///
/// The directory is the JVM's, so what is at `path` is the process's to
/// plant: an existing name (a link to another file) is unlinked, never
/// opened, and the file is created new (`O_EXCL`), so leakwatch never
/// truncates or gives away a file it did not create.
fn create_trigger(path: &Path, id: &Identity) -> std::io::Result<Trigger> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(path)?;
    let trigger = Trigger(path.to_path_buf());
    // Root may give the file away; anyone else already runs as the JVM's
    // user (or is refused by the JVM's socket permissions anyway).
    // SAFETY: getuid has no failure mode.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::fchown(&file, Some(id.uid), Some(id.gid))?;
    }
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(trigger)
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// The bytes of one request: version 1, the command, three arguments.
pub fn request(command: &str, args: &[&str; 3]) -> Vec<u8> {
    let mut out = b"1\0".to_vec();
    for part in std::iter::once(&command).chain(args) {
        out.extend(part.bytes().filter(|&b| b != 0));
        out.push(0);
    }
    out
}

/// The command's output from a whole answer: `0\n` then the output; any
/// other code is a refusal whose message is the output. A `jcmd` that the
/// JVM ran but that failed answers 0 and says so in its output, which the
/// caller's parser then refuses.
pub fn parse_answer(answer: &[u8]) -> Result<String, AttachError> {
    let text = String::from_utf8_lossy(answer);
    let (code, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let Ok(code) = code.trim().parse::<i64>() else {
        let start: String = text.chars().take(80).collect();
        return Err(AttachError::Garbled(start));
    };
    if code != 0 {
        let message: String = rest.trim().chars().take(300).collect();
        return Err(AttachError::Refused { code, message });
    }
    Ok(rest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_the_version_the_command_and_three_arguments() {
        assert_eq!(
            request("jcmd", &["GC.class_histogram", "", ""]),
            b"1\0jcmd\0GC.class_histogram\0\0\0".to_vec()
        );
        // A NUL inside an argument cannot split it into two.
        assert_eq!(
            request("jcmd", &["a\0b", "", ""]),
            b"1\0jcmd\0ab\0\0\0".to_vec()
        );
    }

    #[test]
    fn an_answer_is_its_code_then_the_output() {
        assert_eq!(parse_answer(b"0\nhello\n").unwrap(), "hello\n");
        assert!(matches!(
            parse_answer(b"101\nNo such command"),
            Err(AttachError::Refused { code: 101, .. })
        ));
        assert!(matches!(
            parse_answer(b"\x89PNG"),
            Err(AttachError::Garbled(_))
        ));
        assert!(matches!(parse_answer(b""), Err(AttachError::Garbled(_))));
    }

    #[test]
    fn a_planted_trigger_name_is_replaced_not_opened() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        let trigger = dir.path().join(".attach_pid7");
        std::fs::hard_link(&victim, &trigger).unwrap();
        let id = Identity {
            ns_pid: 7,
            uid: 12345,
            gid: 12345,
            catches_sigquit: true,
        };
        let made = create_trigger(&trigger, &id).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        use std::os::unix::fs::MetadataExt;
        assert_ne!(std::fs::metadata(&victim).unwrap().uid(), 12345);
        drop(made);
        assert!(!trigger.exists() && victim.exists());
    }

    #[test]
    fn identity_is_read_from_status() {
        let status = "Name:\tjava\nUid:\t1000\t1001\t1000\t1000\nGid:\t50\t51\t50\t50\n\
                      NSpid:\t4242\t7\nSigCgt:\t0000000181005ccf\n";
        let id = identity(status, 4242).unwrap();
        assert_eq!(id.ns_pid, 7);
        assert_eq!((id.uid, id.gid), (1001, 51));
        assert!(id.catches_sigquit);
        let ignores = status.replace("0000000181005ccf", "0000000181005cc8");
        assert!(!identity(&ignores, 4242).unwrap().catches_sigquit);
        assert!(identity("Name:\tjava\n", 1).is_none());
    }
}
