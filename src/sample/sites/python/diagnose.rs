//! Why a process of the tree has no `--py-sites` endpoint: not Python, a
//! Python that ignores PYTHONPATH (`-I`, `-E`) or skips `site` (`-S`), an
//! environment the program changed, another user, or what the bootstrap
//! itself reported in `D/<pid>.err`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The reason a process did not answer, for the report's "not instrumented" list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Silence {
    /// The process has exited.
    Exited,
    /// Not a Python interpreter (by its executable and mappings).
    NotPython { exe: String },
    /// Python started with `-I` or `-E`: PYTHONPATH is ignored, so the
    /// bootstrap never loads.
    IgnoresPythonpath { flag: char },
    /// Python started with `-S`: no `site`, so no `sitecustomize`.
    NoSite,
    /// Not started by this leakwatch (a `--watch` process, running before
    /// it): `--py-sites` instruments what the command starts.
    NotStarted,
    /// Its environment (as of its exec) lacks the bootstrap's PYTHONPATH
    /// entry or `LEAKWATCH_PY_DIR`: the program replaced the environment.
    EnvironmentChanged { missing: &'static str },
    /// Runs as another user, who cannot enter the private directory.
    OtherUser { uid: u32 },
    /// The bootstrap said why (from `D/<pid>.err`), e.g. Python older than 3.7.
    Bootstrap { message: String },
    /// Python with the environment in place and no error reported: it may
    /// have started after the request, or an earlier `sitecustomize` on
    /// sys.path (put there by a `.pth` file) shadows leakwatch's.
    Unknown,
}

impl std::fmt::Display for Silence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Silence::Exited => write!(f, "exited before answering"),
            Silence::NotPython { exe } => write!(f, "not Python ({exe})"),
            Silence::IgnoresPythonpath { flag } => write!(
                f,
                "Python started with -{flag}, which ignores PYTHONPATH; run it without -{flag} to \
                 see its allocation sites"
            ),
            Silence::NoSite => write!(
                f,
                "Python started with -S, which skips site and so sitecustomize; run it without -S"
            ),
            Silence::NotStarted => write!(
                f,
                "Python that this leakwatch did not start (it ran before it): --py-sites \
                 instruments the processes the command starts; restart it under `leakwatch run \
                 --py-sites --keep-survivors -- <its start command>`"
            ),
            Silence::EnvironmentChanged { missing } => write!(
                f,
                "Python whose environment lacks {missing}: the program that started it replaced \
                 the environment; pass PYTHONPATH and LEAKWATCH_PY_DIR through"
            ),
            Silence::OtherUser { uid } => write!(
                f,
                "runs as uid {uid}, which cannot reach leakwatch's private directory; run \
                 leakwatch as that user"
            ),
            Silence::Bootstrap { message } => write!(f, "{message}"),
            Silence::Unknown => write!(
                f,
                "Python, but no answer: it may have started after the request, or another \
                 sitecustomize earlier on sys.path shadows leakwatch's"
            ),
        }
    }
}

/// Interpreter flags that keep the bootstrap from loading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PyFlags {
    pub isolated: bool,
    pub ignore_environment: bool,
    pub no_site: bool,
}

/// Reads the interpreter options of a Python command line (argv\[0\] is the
/// interpreter): single-letter flags may be combined (`-IS`), `-W`/`-X`
/// take a value (attached or next), `-c`/`-m`/a script/`-`/`--` end them.
pub fn python_flags<A: AsRef<[u8]>>(argv: &[A]) -> PyFlags {
    let mut flags = PyFlags::default();
    let mut args = argv.iter().skip(1).map(AsRef::as_ref);
    while let Some(arg) = args.next() {
        if arg == b"--" || arg == b"-" || !arg.starts_with(b"-") {
            break;
        }
        if arg.starts_with(b"--") {
            if arg == b"--check-hash-based-pycs" {
                args.next();
            }
            continue;
        }
        for (i, &c) in arg.iter().enumerate().skip(1) {
            match c {
                b'I' => flags.isolated = true,
                b'E' => flags.ignore_environment = true,
                b'S' => flags.no_site = true,
                b'c' | b'm' => return flags,
                b'W' | b'X' => {
                    if i + 1 == arg.len() {
                        args.next();
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    flags
}

/// Whether an executable path or mapping names a Python interpreter.
pub fn looks_like_python(name: &OsStr) -> bool {
    let base = Path::new(name)
        .file_name()
        .map(OsStrExt::as_bytes)
        .unwrap_or_default();
    base.starts_with(b"python") || base.starts_with(b"pypy") || base.starts_with(b"libpython")
}

/// The value of `key` in a NUL-separated `/proc/PID/environ`.
pub fn environ_get<'a>(environ: &'a [u8], key: &str) -> Option<&'a [u8]> {
    environ.split(|&b| b == 0).find_map(|kv| {
        kv.strip_prefix(key.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(cmdline: &str) -> PyFlags {
        let argv: Vec<&str> = cmdline.split(' ').collect();
        python_flags(&argv)
    }

    #[test]
    fn reads_interpreter_flags_up_to_the_program() {
        assert!(flags("python3 -I app.py").isolated);
        assert!(flags("/usr/bin/python3.11 -bIu app.py").isolated);
        assert!(flags("python3 -E -m http.server").ignore_environment);
        assert!(flags("python3 -ES x.py").no_site);
        assert_eq!(flags("python3 app.py -I"), PyFlags::default());
        assert_eq!(flags("python3 -c import -I"), PyFlags::default());
        assert_eq!(flags("python3 -m mod -E"), PyFlags::default());
        assert_eq!(flags("python3 -W ignore -X dev app.py"), PyFlags::default());
        assert_eq!(flags("python3 -Werror -Xdev -s app.py"), PyFlags::default());
        // -W's value is not a flag: "I" here is a warning filter.
        assert_eq!(flags("python3 -W I app.py"), PyFlags::default());
        assert!(flags("python3 --check-hash-based-pycs never -I x").isolated);
        assert_eq!(flags("python3 -- -I"), PyFlags::default());
    }

    #[test]
    fn knows_interpreters_by_name() {
        assert!(looks_like_python(OsStr::new("/usr/bin/python3.11")));
        assert!(looks_like_python(OsStr::new(
            "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"
        )));
        assert!(looks_like_python(OsStr::new("pypy3")));
        assert!(!looks_like_python(OsStr::new("/bin/sh")));
        assert!(!looks_like_python(OsStr::new("/opt/pythonista/bin/node")));
    }

    #[test]
    fn finds_environment_values() {
        let env = b"A=1\0PYTHONPATH=/d/boot:/x\0PYTHONPATHX=no\0";
        assert_eq!(environ_get(env, "PYTHONPATH"), Some(&b"/d/boot:/x"[..]));
        assert_eq!(environ_get(env, "B"), None);
    }
}
