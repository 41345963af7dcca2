//! What `attach` follows, named other ways than by PID: a name pattern
//! (`--name`, pgrep-like), a cgroup (`--cgroup`), a systemd unit (`--unit`,
//! resolved to its cgroup). Resolved once before sampling starts
//! (`resolve`); then `Members` says, at each tick, which processes to sample
//! and adds the cgroup's own accounting row.

mod cgroup;

use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

use crate::sample::procfs::{Candidate, ProcRoot};
use crate::sample::rows::Context;
use crate::store::Row;
pub use cgroup::{Cgroup, CgroupError};

/// A target as the user named it (`Pid`, `Name`, `Cgroup` path, `Unit`), or
/// as resolved (`Pid`, `Name` with `all`, `Group`).
#[derive(Debug, Clone)]
pub enum Target {
    Pid(u32),
    /// Processes whose name or command line matches; with `all`, every
    /// match (matched again at each tick), else exactly one.
    Name {
        regex: Regex,
        all: bool,
    },
    /// A cgroup path as typed.
    Cgroup(PathBuf),
    /// A systemd unit name, e.g. `nginx.service`.
    Unit(String),
    /// A resolved cgroup (from `Cgroup` or `Unit`).
    Group(Cgroup),
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Process(#[from] crate::sample::ResolveError),
    #[error(
        "--name '{0}' matches no process (names and command lines were searched); \
         check with `pgrep -af '{0}'`"
    )]
    NoMatch(String),
    #[error(
        "--name '{pattern}' matches {count} processes: {listed}; give one PID, a narrower \
         pattern, or --all to follow them all"
    )]
    SeveralMatches {
        pattern: String,
        count: usize,
        listed: String,
    },
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(
        "--unit {0}: systemd is not running on this machine (no /run/systemd/system); give \
         the service's cgroup with --cgroup PATH, its PID, or --name"
    )]
    NoSystemd(String),
    #[error(
        "--unit {unit}: systemd gives it no cgroup ({why}); check `systemctl status {unit}` \
         (is it running?)"
    )]
    NoUnitCgroup { unit: String, why: String },
}

/// leakwatch and its ancestors: their command lines hold the pattern too
/// (`leakwatch attach --name foo`, the shell that ran it).
fn own_lineage(root: &ProcRoot) -> Vec<u32> {
    let mut pids = vec![std::process::id()];
    while let Some(&pid) = pids.last() {
        match root.stat(pid) {
            Ok(s) if s.ppid > 0 && !pids.contains(&s.ppid) => pids.push(s.ppid),
            _ => break,
        }
    }
    pids
}

/// The matching processes, leakwatch and its ancestors left out.
pub fn matches(regex: &Regex, candidates: &[Candidate], exclude: &[u32]) -> Vec<Candidate> {
    candidates
        .iter()
        .filter(|c| !exclude.contains(&c.pid))
        .filter(|c| regex.is_match(&c.comm) || regex.is_match(&c.cmdline))
        .cloned()
        .collect()
}

/// One match, or a clear error for none or several (unless `all`).
fn resolve_name(regex: &Regex, all: bool, root: &ProcRoot) -> Result<Target, TargetError> {
    let found = matches(regex, &root.candidates(), &own_lineage(root));
    let pattern = regex.as_str().to_string();
    match found.as_slice() {
        [] => Err(TargetError::NoMatch(pattern)),
        [one] if !all => Ok(Target::Pid(one.pid)),
        _ if all => Ok(Target::Name {
            regex: regex.clone(),
            all,
        }),
        several => {
            let mut listed: Vec<String> = several
                .iter()
                .take(5)
                .map(|c| format!("{} ({})", c.pid, c.comm))
                .collect();
            if several.len() > 5 {
                listed.push("…".into());
            }
            Err(TargetError::SeveralMatches {
                pattern,
                count: several.len(),
                listed: listed.join(", "),
            })
        }
    }
}

/// A systemd unit's cgroup, from `systemctl show -p ControlGroup`.
fn resolve_unit(unit: &str) -> Result<Target, TargetError> {
    if !Path::new("/run/systemd/system").is_dir() {
        return Err(TargetError::NoSystemd(unit.to_string()));
    }
    let no_cgroup = |why: String| TargetError::NoUnitCgroup {
        unit: unit.to_string(),
        why,
    };
    let out = Command::new("systemctl")
        .args(["show", "--property=ControlGroup", "--value", "--", unit])
        .output()
        .map_err(|e| no_cgroup(format!("cannot run systemctl: {e}")))?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || path.is_empty() {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(no_cgroup(if err.is_empty() {
            "ControlGroup is empty".into()
        } else {
            err
        }));
    }
    Ok(Target::Group(Cgroup::resolve(
        Path::new(&path),
        Path::new(cgroup::SYS_CGROUP),
    )?))
}

/// The target resolved against this machine (its processes as `root`
/// shows them): a name with one match becomes its PID, a unit or a cgroup
/// path becomes a cgroup directory.
pub fn resolve(target: &Target, root: &ProcRoot) -> Result<Target, TargetError> {
    match target {
        Target::Pid(_) | Target::Group(_) => Ok(target.clone()),
        Target::Name { regex, all } => resolve_name(regex, *all, root),
        Target::Cgroup(path) => Ok(Target::Group(Cgroup::resolve(
            path,
            Path::new(cgroup::SYS_CGROUP),
        )?)),
        Target::Unit(unit) => resolve_unit(unit),
    }
}

/// Which processes to sample at each tick, and what else the target adds.
#[derive(Debug, Clone)]
pub struct Members {
    target: Target,
}

impl Members {
    /// `target` as `resolve` returned it.
    pub fn new(target: &Target) -> Self {
        Members {
            target: target.clone(),
        }
    }

    /// The one process attached to, when there is one.
    pub fn leader(&self) -> Option<u32> {
        match self.target {
            Target::Pid(pid) => Some(pid),
            _ => None,
        }
    }

    /// What is followed when it is not one PID (for samples.csv's `target`
    /// row and the reports).
    pub fn describe(&self) -> Option<String> {
        match &self.target {
            Target::Pid(_) => None,
            Target::Name { regex, .. } => Some(format!(
                "processes matching '{}' (all, matched at each sample)",
                regex.as_str()
            )),
            Target::Group(cg) => Some(format!("cgroup {}", cg.dir.display())),
            Target::Cgroup(p) => Some(format!("cgroup {}", p.display())),
            Target::Unit(u) => Some(format!("unit {u}")),
        }
    }

    /// The processes to sample now: the target with its descendants, every
    /// match with theirs, or the cgroup's processes; leakwatch (`skip`) and
    /// its own descendants never.
    pub fn pids(&self, root: &ProcRoot, skip: u32) -> Vec<u32> {
        match &self.target {
            Target::Pid(pid) => root.tree_without(*pid, Some(skip)),
            Target::Name { regex, .. } => {
                let found = matches(regex, &root.candidates(), &own_lineage(root));
                let mut seen = std::collections::BTreeSet::new();
                let mut pids: Vec<u32> = Vec::new();
                for c in &found {
                    if seen.contains(&c.pid) {
                        continue;
                    }
                    for p in root.tree_without(c.pid, Some(skip)) {
                        if seen.insert(p) {
                            pids.push(p);
                        }
                    }
                }
                pids
            }
            Target::Group(cg) => cg.pids().into_iter().filter(|&p| p != skip).collect(),
            Target::Cgroup(_) | Target::Unit(_) => Vec::new(),
        }
    }

    /// Rows the target adds to each sample: a cgroup's own accounting.
    pub fn own_rows(&self, ctx: &Context) -> Vec<Row> {
        match &self.target {
            Target::Group(cg) => cg
                .memory()
                .map(|m| vec![cgroup::row(ctx, cg, &m)])
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// For targets that are not one process: why sampling should stop (the
    /// cgroup was removed, no process matches any more), if it should.
    pub fn ended(&self, root: &ProcRoot) -> Option<String> {
        match &self.target {
            Target::Group(cg) if !cg.exists() => Some(format!(
                "cgroup {} was removed; sampling stopped",
                cg.dir.display()
            )),
            Target::Name { regex, .. }
                if matches(regex, &root.candidates(), &own_lineage(root)).is_empty() =>
            {
                Some(format!(
                    "no process matches '{}' any more; sampling stopped",
                    regex.as_str()
                ))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(pid: u32, comm: &str, cmdline: &str) -> Candidate {
        Candidate {
            pid,
            comm: comm.into(),
            cmdline: cmdline.into(),
        }
    }

    #[test]
    fn names_match_on_comm_or_command_line_leaving_out_leakwatch() {
        let all = [
            c(10, "nginx", "nginx: master process"),
            c(11, "python3", "python3 -m celery worker"),
            c(12, "leakwatch", "leakwatch attach --name celery"),
        ];
        let re = Regex::new("celery").unwrap();
        let found: Vec<u32> = matches(&re, &all, &[12]).iter().map(|c| c.pid).collect();
        assert_eq!(found, vec![11]);
        let re = Regex::new("^nginx$").unwrap();
        assert_eq!(matches(&re, &all, &[]).len(), 1);
    }

    #[test]
    fn no_systemd_is_a_clear_error() {
        if Path::new("/run/systemd/system").is_dir() {
            return;
        }
        let err = resolve(&Target::Unit("nginx.service".into()), &ProcRoot::default()).unwrap_err();
        assert!(err.to_string().contains("systemd is not running"), "{err}");
    }
}
