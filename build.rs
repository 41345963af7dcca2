//! Builds the `--native-sites` shim (`shim/`, `libleakwatch_shim.so`) and
//! leaves it in OUT_DIR for `include_bytes!`, so that an installed leakwatch
//! (`cargo install` installs one binary) carries its shim (issue 21).
//!
//! The shim is preloaded into users' programs: it is always built with the
//! release profile, by a nested cargo with its own target directory under
//! OUT_DIR (the outer cargo holds the lock of its own). Where it cannot be
//! built (a package without `shim/`, a failed build) leakwatch is still
//! built, with nothing embedded and a warning: `--native-sites` then says
//! how to get the shim. Under clippy nothing is built (clippy writes no
//! binary, and would lint the shim a second time).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const SHIM_FILE: &str = "libleakwatch_shim.so";

fn main() {
    declare_test_dependencies();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default());
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let shim_dir = manifest_dir.join("shim");
    // A path that does not exist would rerun this script on every build.
    for path in ["shim/src", "shim/Cargo.toml", "Cargo.toml", "Cargo.lock"] {
        if manifest_dir.join(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    // A build under clippy must not leave an empty shim to a later real
    // build sharing this OUT_DIR.
    println!("cargo:rerun-if-env-changed=RUSTC_WORKSPACE_WRAPPER");
    println!("cargo:rerun-if-env-changed=CLIPPY_ARGS");

    let embedded = out_dir.join(SHIM_FILE);
    let outcome = if under_clippy() {
        Err(None)
    } else if !shim_dir.join("Cargo.toml").is_file() {
        Err(Some(format!(
            "{} is absent (a packaged leakwatch)",
            shim_dir.display()
        )))
    } else {
        build_shim(&manifest_dir, &out_dir.join("shim-target"))
    };
    let bytes = match outcome {
        Ok(built) => fs::read(&built).map_err(|e| Some(format!("{}: {e}", built.display()))),
        Err(why) => Err(why),
    };
    let bytes = bytes.unwrap_or_else(|why| {
        if let Some(why) = why {
            println!(
                "cargo:warning=the --native-sites shim is not embedded in leakwatch: {why}; \
                 `leakwatch run --native-sites` will need {SHIM_FILE} beside the binary or \
                 LEAKWATCH_SHIM"
            );
        }
        Vec::new()
    });
    if let Err(e) = fs::write(&embedded, bytes) {
        // include_bytes! fails next with the path: nothing else to do here.
        println!("cargo:warning=cannot write {}: {e}", embedded.display());
    }
}

/// `cargo clippy` runs clippy-driver as the workspace's rustc wrapper.
/// The tests that need what `.ci/deps` installs (real servers and runtimes, gdb, root, a
/// cgroup v1 memory controller) run where those are declared present: under CI (`CI`), or
/// with `LEAKWATCH_DEPS=1`, which `bash .ci/test` sets after installing them. Elsewhere
/// `cargo test` lists them as ignored, with the command that runs them: a test whose
/// dependency is missing is never counted as passed (tests/README.md).
fn declare_test_dependencies() {
    println!("cargo:rustc-check-cfg=cfg(lw_deps)");
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rerun-if-env-changed=LEAKWATCH_DEPS");
    let set = |name: &str| env::var(name).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    if set("CI") || set("LEAKWATCH_DEPS") {
        println!("cargo:rustc-cfg=lw_deps");
    }
}

fn under_clippy() -> bool {
    env::var_os("CLIPPY_ARGS").is_some()
        || env::var_os("RUSTC_WORKSPACE_WRAPPER").is_some_and(|w| {
            Path::new(&w)
                .file_stem()
                .is_some_and(|s| s.to_string_lossy().contains("clippy"))
        })
}

/// `cargo build --release -p leakwatch-shim` into `target_dir`, for the
/// target this leakwatch is built for; the built file, or why not.
fn build_shim(manifest_dir: &Path, target_dir: &Path) -> Result<PathBuf, Option<String>> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = env::var("TARGET").unwrap_or_default();
    // Offline first: the shim's one dependency (libc) is leakwatch's too,
    // downloaded already; the network only if the lock names another.
    let mut last = String::new();
    for offline in [true, false] {
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(manifest_dir)
            .args(["build", "--release", "--locked", "-p", "leakwatch-shim"])
            .arg("--manifest-path")
            .arg(manifest_dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target_dir);
        if !target.is_empty() {
            cmd.args(["--target", &target]);
        }
        if offline {
            cmd.arg("--offline");
        }
        // The outer build's settings that must not reach the shim: clippy's
        // wrapper, the outer target directory (its lock is held), the
        // outer's compiler flags (coverage instrumentation, -D warnings
        // in CI: the shim has its own profile), and cargo's own variables
        // for this build script.
        for var in [
            "RUSTC_WORKSPACE_WRAPPER",
            "CLIPPY_ARGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "CARGO_ENCODED_RUSTFLAGS",
            "RUSTFLAGS",
            "CARGO_BUILD_RUSTFLAGS",
            "CARGO_INCREMENTAL",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "OUT_DIR",
        ] {
            cmd.env_remove(var);
        }
        // Without DWARF: 4.6 MiB of the 4.9 a release shim weighs is debug
        // info (the profile's `debug = 1` and std's), which nothing reads
        // in a shim; its symbols stay for a debugger's backtrace.
        cmd.env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
        match cmd.output() {
            Ok(out) if out.status.success() => {
                let dir = if target.is_empty() {
                    target_dir.join("release")
                } else {
                    target_dir.join(&target).join("release")
                };
                return Ok(dir.join(SHIM_FILE));
            }
            Ok(out) => {
                // The first error names the cause (the last only counts them).
                let stderr = String::from_utf8_lossy(&out.stderr);
                let mut lines = stderr.lines().map(str::trim).filter(|l| !l.is_empty());
                let cause = lines
                    .clone()
                    .find(|l| l.starts_with("error"))
                    .or_else(|| lines.next_back())
                    .unwrap_or("no output");
                last = format!(
                    "`cargo build --release -p leakwatch-shim` failed ({}): {cause}",
                    out.status
                );
            }
            Err(e) => last = format!("cannot run {}: {e}", Path::new(&cargo).display()),
        }
    }
    Err(Some(last))
}
