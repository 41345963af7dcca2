//! A cgroup as a target: its member processes (`cgroup.procs` of it and its
//! descendants) and its own memory accounting, which also sees memory no
//! process' RSS holds — page cache, tmpfs/shm files, and kernel memory
//! (slab: dentries, inodes, sockets; kernel stacks; page tables).
//!
//! cgroup v2: `memory.current`, `memory.stat` (anon, file, shmem, kernel,
//! kernel_stack, pagetables, sock, slab_reclaimable, slab_unreclaimable),
//! `memory.swap.current`. cgroup v1: `memory.usage_in_bytes`, `memory.stat`
//! (hierarchical `total_rss`, `total_cache`, `total_shmem`, `total_swap`),
//! `memory.kmem.usage_in_bytes` (all kernel memory in one number: v1 has no
//! split by kind) and `memory.kmem.tcp.usage_in_bytes` (TCP socket buffers,
//! counted only once a TCP limit has been set on the cgroup).
//! (Kernel docs: admin-guide/cgroup-v2.rst "memory.stat", cgroup-v1/memory.rst.)

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::sample::rows::Context;
use crate::store::{Row, Scope, Tier};

/// Where cgroup file systems are mounted on every distribution we know.
pub const SYS_CGROUP: &str = "/sys/fs/cgroup";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// A cgroup directory with a memory controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    pub dir: PathBuf,
    pub version: Version,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "--cgroup {0}: no such cgroup; give its directory under /sys/fs/cgroup (v1: under \
         /sys/fs/cgroup/memory) or the path `cat /proc/PID/cgroup` shows for one of its processes"
    )]
    NotFound(String),
    #[error(
        "--cgroup {0}: this cgroup has no memory accounting (no memory.current nor \
         memory.usage_in_bytes); on cgroup v2 enable the memory controller in its parent's \
         cgroup.subtree_control, on v1 give the path under /sys/fs/cgroup/memory"
    )]
    NoMemoryController(String),
}

/// A cgroup's memory at one sample, in bytes. What the kernel does not give
/// (v1 has no slab split) is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupMemory {
    pub usage: Option<u64>,
    pub anon: Option<u64>,
    /// Page cache (v1 `cache`, v2 `file`); includes shmem.
    pub file: Option<u64>,
    pub shmem: Option<u64>,
    pub swap: Option<u64>,
    pub kernel: Option<u64>,
    pub sock: Option<u64>,
    pub slab_reclaimable: Option<u64>,
    pub slab_unreclaimable: Option<u64>,
    pub kernel_stack: Option<u64>,
    pub pagetables: Option<u64>,
}

fn version_of(dir: &Path) -> Option<Version> {
    if dir.join("memory.current").is_file() {
        Some(Version::V2)
    } else if dir.join("memory.usage_in_bytes").is_file() {
        Some(Version::V1)
    } else {
        None
    }
}

impl Cgroup {
    /// Finds the cgroup `path` names: a cgroup directory, or a path as
    /// `/proc/PID/cgroup` shows it, looked up under `sys` (normally
    /// `/sys/fs/cgroup`) in the v2 hierarchy, the hybrid `unified` one and
    /// the v1 memory hierarchy, in that order.
    pub fn resolve(path: &Path, sys: &Path) -> Result<Cgroup, CgroupError> {
        let shown = path.display().to_string();
        let mut candidates = Vec::new();
        if path.join("cgroup.procs").is_file() {
            candidates.push(path.to_path_buf());
        }
        let relative = path.strip_prefix("/").unwrap_or(path);
        if path.is_absolute() && !path.starts_with(sys) {
            for base in [sys.to_path_buf(), sys.join("unified"), sys.join("memory")] {
                candidates.push(base.join(relative));
            }
        }
        let existing: Vec<PathBuf> = candidates
            .into_iter()
            .filter(|d| d.join("cgroup.procs").is_file())
            .collect();
        if existing.is_empty() {
            return Err(CgroupError::NotFound(shown));
        }
        existing
            .iter()
            .find_map(|d| {
                version_of(d).map(|version| Cgroup {
                    dir: d.clone(),
                    version,
                })
            })
            .ok_or(CgroupError::NoMemoryController(shown))
    }

    pub fn exists(&self) -> bool {
        self.dir.join("cgroup.procs").is_file()
    }

    /// The processes of the cgroup and of its descendant cgroups.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        let mut dirs = vec![self.dir.clone()];
        while let Some(dir) = dirs.pop() {
            if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
                pids.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
            if let Ok(entries) = fs::read_dir(&dir) {
                dirs.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// The cgroup's own accounting now.
    pub fn memory(&self) -> io::Result<CgroupMemory> {
        let number = |name: &str| -> Option<u64> {
            fs::read_to_string(self.dir.join(name))
                .ok()
                .and_then(|t| t.trim().parse().ok())
        };
        let stat = fs::read_to_string(self.dir.join("memory.stat"))?;
        Ok(match self.version {
            Version::V1 => CgroupMemory {
                usage: number("memory.usage_in_bytes"),
                kernel: number("memory.kmem.usage_in_bytes"),
                sock: number("memory.kmem.tcp.usage_in_bytes"),
                ..parse_stat_v1(&stat)
            },
            Version::V2 => CgroupMemory {
                usage: number("memory.current"),
                swap: number("memory.swap.current"),
                ..parse_stat_v2(&stat)
            },
        })
    }
}

fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// v1 `memory.stat`: the hierarchical `total_*` fields (the cgroup and its
/// children, as `memory.usage_in_bytes` counts), else the local ones.
pub fn parse_stat_v1(text: &str) -> CgroupMemory {
    let get = |key: &str| field(text, &format!("total_{key}")).or_else(|| field(text, key));
    CgroupMemory {
        anon: get("rss"),
        file: get("cache"),
        shmem: get("shmem"),
        swap: get("swap"),
        ..CgroupMemory::default()
    }
}

/// v2 `memory.stat` (hierarchical already). `kernel` appeared in Linux
/// 5.18; before it, it is the sum of the parts.
pub fn parse_stat_v2(text: &str) -> CgroupMemory {
    let get = |key: &str| field(text, key);
    let kernel_stack = get("kernel_stack");
    let pagetables = get("pagetables");
    let sock = get("sock");
    let slab_reclaimable = get("slab_reclaimable");
    let slab_unreclaimable = get("slab_unreclaimable");
    let parts = [
        kernel_stack,
        pagetables,
        slab_reclaimable,
        slab_unreclaimable,
    ];
    let kernel = get("kernel").or_else(|| {
        parts
            .iter()
            .all(Option::is_some)
            .then(|| parts.iter().flatten().sum())
    });
    CgroupMemory {
        usage: None,
        anon: get("anon"),
        file: get("file"),
        shmem: get("shmem"),
        swap: None,
        kernel,
        sock,
        slab_reclaimable,
        slab_unreclaimable,
        kernel_stack,
        pagetables,
    }
}

/// The cgroup's row of one sample (scope `cgroup`, pid 0, its path as the name).
pub fn row(ctx: &Context, cgroup: &Cgroup, m: &CgroupMemory) -> Row {
    Row {
        comm: crate::escape::inert_bytes(cgroup.dir.as_os_str().as_encoded_bytes()),
        tier: Tier::Cheap,
        usage_bytes: m.usage,
        anon_bytes: m.anon,
        file_bytes: m.file,
        shmem_bytes: m.shmem,
        swap_bytes: m.swap,
        kernel_bytes: m.kernel,
        sock_bytes: m.sock,
        slab_reclaimable_bytes: m.slab_reclaimable,
        slab_unreclaimable_bytes: m.slab_unreclaimable,
        kernel_stack_bytes: m.kernel_stack,
        pagetables_bytes: m.pagetables,
        ..ctx.row(Scope::Cgroup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "cache 21020672\nrss 7958528\nshmem 20971520\nswap 0\n\
                      total_cache 31020672\ntotal_rss 8958528\ntotal_shmem 20971520\ntotal_swap 0\n";
    const V2: &str = "anon 1000\nfile 2000\nkernel 900\nkernel_stack 100\npagetables 200\n\
                      sock 50\nshmem 300\nslab_reclaimable 250\nslab_unreclaimable 350\n";

    #[test]
    fn v1_stat_prefers_the_hierarchical_totals() {
        let m = parse_stat_v1(V1);
        assert_eq!(m.anon, Some(8958528));
        assert_eq!(m.file, Some(31020672));
        assert_eq!(m.shmem, Some(20971520));
        assert_eq!(m.kernel, None);
    }

    #[test]
    fn v2_stat_reads_kernel_memory_by_kind() {
        let m = parse_stat_v2(V2);
        assert_eq!(
            (m.anon, m.kernel, m.sock),
            (Some(1000), Some(900), Some(50))
        );
        let old = V2.replace("kernel 900\n", "");
        assert_eq!(parse_stat_v2(&old).kernel, Some(900));
    }

    #[test]
    fn resolves_directories_and_proc_paths_in_a_fake_tree() {
        let sys = tempfile::tempdir().unwrap();
        let v1 = sys.path().join("memory/app");
        fs::create_dir_all(v1.join("child")).unwrap();
        fs::write(v1.join("cgroup.procs"), "10\n11\n").unwrap();
        fs::write(v1.join("child/cgroup.procs"), "12\n").unwrap();
        fs::write(v1.join("memory.usage_in_bytes"), "4096\n").unwrap();
        fs::write(v1.join("memory.stat"), V1).unwrap();
        let by_dir = Cgroup::resolve(&v1, sys.path()).unwrap();
        let by_proc_path = Cgroup::resolve(Path::new("/app"), sys.path()).unwrap();
        assert_eq!(by_dir, by_proc_path);
        assert_eq!(by_dir.version, Version::V1);
        assert_eq!(by_dir.pids(), vec![10, 11, 12]);
        assert_eq!(by_dir.memory().unwrap().usage, Some(4096));
        let err = Cgroup::resolve(Path::new("/nope"), sys.path()).unwrap_err();
        assert!(err.to_string().contains("no such cgroup"), "{err}");
        // A cgroup of another controller only: no memory accounting.
        let freezer = sys.path().join("freezer/app");
        fs::create_dir_all(&freezer).unwrap();
        fs::write(freezer.join("cgroup.procs"), "").unwrap();
        let err = Cgroup::resolve(&freezer, sys.path()).unwrap_err();
        assert!(matches!(err, CgroupError::NoMemoryController(_)), "{err}");
    }
}
