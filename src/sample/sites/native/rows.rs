//! `run --native-sites`: after each run's deep sample, the file of every
//! process with the shim gives its live sampled stacks, leakwatch names their
//! frames, and each stack is filed under its *site*: its first frame outside
//! the allocator and the runtimes (malloc, `operator new`, `std::`,
//! `alloc::` …). A site's live bytes in each process become a `site` row of
//! samples.csv, as a Python line's do, so the same fits and verdicts apply.

use std::collections::{BTreeMap, BTreeSet};

use super::NativeSites;
use super::file::Snapshot;
use super::symbols::{NamedFrame, ProcessMaps, Symbolizer};
use crate::sample::Context;
use crate::store::{Row, Scope};
/// Frames shown per traceback.
const MAX_SHOWN_FRAMES: usize = 16;

/// What the session remembers between runs.
#[derive(Debug, Default)]
pub struct NativeSession {
    symbols: Symbolizer,
    /// (scope, site) whose traceback is already in samples.csv.
    tracebacks: BTreeSet<(Scope, String)>,
    /// Processes already noted.
    noted: BTreeSet<u32>,
    /// (pid, slot) of the stacks that held memory at a reading: listed at
    /// every later one, at 0 once freed, so their series go on. A stack
    /// that never held memory when read is left out.
    listed: BTreeSet<(u32, u32)>,
}

impl NativeSession {
    /// Reads the file of every process with the shim after `ctx`'s run;
    /// `sampled` are the rows of this run's deep sample (which scope each
    /// pid is in). Returns the rows, and notes for processes that could not
    /// be read or entered.
    pub fn collect(
        &mut self,
        sites: &NativeSites,
        ctx: &Context,
        sampled: &[Row],
    ) -> (Vec<Row>, Vec<String>) {
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        let mut read = BTreeSet::new();
        for pid in sites.endpoints() {
            let Some(process) = sampled
                .iter()
                .find(|r| r.pid == pid && r.is_process_sample())
            else {
                // Not followed (the command's own processes, gone by now):
                // its file goes once it has exited.
                sites.forget_if_gone(pid);
                continue;
            };
            match sites.read(pid) {
                Ok(mut snapshot) => {
                    // A point of a site's series is when its table was read, not when the
                    // batch began: over time (attach) the batch's page walks and the other
                    // processes' files came first, each taking longer under load.
                    let ctx = &ctx.now();
                    read.insert(pid);
                    snapshot.stacks.retain(|s| {
                        if s.bytes > 0 {
                            self.listed.insert((pid, s.slot));
                        }
                        self.listed.contains(&(pid, s.slot))
                    });
                    if snapshot.dropped > 0 && self.noted.insert(pid) {
                        notes.push(format!(
                            "process {pid}: the --native-sites shim's tables were full for {} \
                             of {} samples; raise --native-interval",
                            snapshot.dropped, snapshot.samples
                        ));
                    }
                    match self.rows_of(ctx, process, &snapshot) {
                        Some(more) => rows.extend(more),
                        None if self.noted.insert(pid) => notes.push(format!(
                            "--native-sites: process {pid} exited before its frames could be \
                             named"
                        )),
                        None => {}
                    }
                }
                Err(why) if self.noted.insert(pid) => notes.push(format!("--native-sites: {why}")),
                Err(_) => {}
            }
        }
        notes.extend(self.silent(sampled, &read));
        (rows, notes)
    }

    /// One row per site of the process, its traceback the first time;
    /// `None` when its maps are gone (it exited), which name the frames.
    fn rows_of(&mut self, ctx: &Context, process: &Row, snapshot: &Snapshot) -> Option<Vec<Row>> {
        let maps = ProcessMaps::read(process.pid)?;
        // site → (bytes, samples, the frames of its largest stack and its bytes)
        let mut by_site: BTreeMap<String, (u64, u64, Vec<NamedFrame>, u64)> = BTreeMap::new();
        for stack in &snapshot.stacks {
            let frames: Vec<NamedFrame> = stack
                .frames
                .iter()
                .flat_map(|&a| self.symbols.name(&maps, a))
                .collect();
            let site = site_name(&frames);
            let entry = by_site.entry(site).or_default();
            entry.0 += stack.bytes;
            entry.1 += stack.samples;
            if entry.2.is_empty() || stack.bytes > entry.3 {
                entry.2 = frames;
                entry.3 = stack.bytes;
            }
        }
        let row = |comm: String, bytes: u64, blocks: Option<u64>| Row {
            site_blocks: blocks,
            ..crate::sample::sites::site_row(ctx, process, comm, bytes)
        };
        let mut rows = Vec::new();
        for (site, (bytes, samples, frames, _)) in by_site {
            if self.tracebacks.insert((process.scope, site.clone())) {
                let shown: Vec<String> = frames
                    .iter()
                    .take(MAX_SHOWN_FRAMES)
                    .map(|f| crate::escape::inert(&f.display()).into_owned())
                    .collect();
                rows.push(Row {
                    event: Some("traceback".into()),
                    ..row(format!("{site}\n{}", shown.join("\n")), 0, None)
                });
            }
            rows.push(row(site, bytes, Some(samples)));
        }
        Some(rows)
    }

    /// Processes of the followed scopes that have no file and cannot have
    /// one: the shim never entered them. Noted once each, with why.
    fn silent(&mut self, sampled: &[Row], read: &BTreeSet<u32>) -> Vec<String> {
        let pids: BTreeSet<u32> = sampled
            .iter()
            .filter(|r| r.is_process_sample() && r.scope != Scope::Command)
            .map(|r| r.pid)
            .collect();
        let mut notes = Vec::new();
        for pid in pids {
            if read.contains(&pid) || self.noted.contains(&pid) {
                continue;
            }
            if let Some(why) = not_entered(pid) {
                self.noted.insert(pid);
                notes.push(format!(
                    "process {pid} is not followed by --native-sites: {why}"
                ));
            }
        }
        notes
    }
}

/// Why the shim is not in `pid`, if it is not (a process that has it but
/// has not yet allocated one interval has no file yet: not noted).
fn not_entered(pid: u32) -> Option<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    if maps.contains(super::SHIM_STEM) {
        return None;
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let has_env = environ
        .split(|&b| b == 0)
        .any(|kv| kv.starts_with(super::ENV_DIR.as_bytes()));
    let exe = std::fs::metadata(format!("/proc/{pid}/exe")).ok();
    let setid = exe
        .as_ref()
        .is_some_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o6000 != 0);
    Some(
        if !has_env {
            "its environment lost LD_PRELOAD (a launcher that clears the environment, or it was \
             not started by this run)"
        } else if setid {
            "a setuid or setgid program ignores LD_PRELOAD"
        } else {
            "the shim is not loaded: a statically linked program ignores LD_PRELOAD"
        }
        .to_string(),
    )
}

/// Frames of the allocator and of language runtimes: a site is the first
/// frame that is none of these.
fn is_runtime(f: &NamedFrame) -> bool {
    const MODULES: [&str; 6] = [
        "libc.so",
        "ld-linux",
        "libstdc++.so",
        "libgcc_s.so",
        super::SHIM_STEM,
        "libc++.so",
    ];
    const FUNCTIONS: [&str; 21] = [
        "malloc",
        "calloc",
        "realloc",
        "operator new",
        "__rust_alloc",
        "__rust_realloc",
        "__rdl_",
        "__rg_",
        "alloc::",
        "<alloc::",
        "std::",
        "<std::",
        "core::",
        "<core::",
        "__gnu_cxx::",
        "hashbrown::",
        // CPython's allocators and tracemalloc's hooks.
        "_PyObject_",
        "PyObject_Malloc",
        "PyMem_",
        "_PyMem_",
        "tracemalloc_",
    ];
    if MODULES.iter().any(|m| f.module.starts_with(m)) {
        return true;
    }
    f.function
        .as_deref()
        .is_some_and(|name| FUNCTIONS.iter().any(|p| name.starts_with(p)))
}

/// The site a stack is filed under: its first frame outside the allocator
/// and runtimes (else its innermost), shown inert.
fn site_name(frames: &[NamedFrame]) -> String {
    let Some(first) = frames.iter().find(|f| !is_runtime(f)).or(frames.first()) else {
        return "(no stack)".to_string();
    };
    crate::escape::inert(&first.display()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, module: &str) -> NamedFrame {
        NamedFrame {
            function: Some(function.into()),
            location: Some(format!("{function}.c:1")),
            module: module.into(),
            offset: 0x10,
        }
    }

    #[test]
    fn the_site_is_the_first_frame_outside_allocators_and_runtimes() {
        let stack = [
            frame("operator new(unsigned long)", "libstdc++.so.6"),
            frame("std::vector<int>::_M_realloc_insert", "daemon"),
            frame("<alloc::vec::Vec<u8>>::push", "daemon"),
            frame("Cache::remember", "daemon"),
            frame("main", "daemon"),
        ];
        assert_eq!(site_name(&stack), "Cache::remember (Cache::remember.c:1)");
        let only_libc = [frame("strdup", "libc.so.6")];
        assert_eq!(site_name(&only_libc), "strdup (strdup.c:1)");
        assert_eq!(site_name(&[]), "(no stack)");
        let python = [
            frame("_PyObject_Malloc", "python3.11"),
            frame("_PyBytes_FromSize", "python3.11"),
        ];
        assert_eq!(
            site_name(&python),
            "_PyBytes_FromSize (_PyBytes_FromSize.c:1)"
        );
    }
}
