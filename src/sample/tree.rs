//! The process tree `attach` follows, read at the kernel's floor.
//!
//! Per tick and process the cheap tier costs one file and one `stat()` call:
//! `status` (memory by kind, threads, parent, name, state) and the size of
//! `/proc/PID/fd` (the number of open fds, Linux 6.2+), both through the
//! process's directory, held open for its life (`ProcDir`): no path lookup,
//! and a reused pid is never mistaken for the process it named, so `stat` —
//! for the start time that identifies a process in samples.csv — is read
//! once per process, when it is found.
//!
//! New processes are found whichever way costs fewer reads: every member's
//! `children` file (one read per single-threaded process, one per thread
//! otherwise), or for a large tree one listing of /proc per tick (≈0.3–1 µs
//! a pid, hot to cold) with a `stat` read for each pid not listed before — the kernel's
//! parent of a new process says whether it joins the tree. Either way a
//! process is followed from the tick it appears to the tick it is gone, and
//! the per-process state is that of the processes alive now: a day of
//! worker churn costs no more memory than its first minute.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use nix::dir::Dir;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::procfs::{ProcDir, ProcError, ProcRoot, Status, raise_fd_limit};
use super::rows::{Context, Who, cheap_row, fill_deep, mapping_row};
use crate::store::{Row, Scope, Tier};

/// A process of the tree, held for its life.
#[derive(Debug)]
pub struct Member {
    dir: ProcDir,
    pub start_time: u64,
    /// The latest `status` read (name, parent, memory).
    pub status: Status,
    pub fds: Option<u64>,
    /// RSS when first read: how much the process grew since.
    pub first_rss_bytes: u64,
    /// The sweep that found it: 1 for the processes there at the first.
    pub found_at: u64,
    state: State,
    /// Reached by this sweep's walk of the tree.
    reached: bool,
}

impl Member {
    /// Running and read this sweep: it has a row.
    pub fn is_live(&self) -> bool {
        self.state == State::Live
    }

    /// RSS now minus RSS when found (bytes).
    pub fn rss_growth(&self) -> i64 {
        self.status.rss_bytes.unwrap_or(0) as i64 - self.first_rss_bytes as i64
    }

    /// Reads that finding its children costs: `children` of the main
    /// thread, or a listing of its threads and each thread's file.
    fn children_reads(&self) -> usize {
        match self.status.threads {
            Some(1) => 1,
            Some(n) => n as usize + 2,
            None => 3,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Live,
    /// Exited, not reaped yet: no memory, listed until its parent waits.
    Zombie,
    /// Its `status` could not be read (not gone): no row this sweep.
    Unreadable,
}

/// What became of the attached process itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TargetState {
    #[default]
    Alive,
    /// Exited (a zombie or gone).
    Exited,
    /// Exited, and its pid now names another process (its command name).
    Replaced(String),
}

/// One sweep of the tree (the cheap tier).
#[derive(Debug, Default)]
pub struct Sweep {
    /// One row per live process.
    pub rows: Vec<Row>,
    /// Processes that joined the tree since the last sweep (pid, name); none
    /// at the first.
    pub started: Vec<(u32, String)>,
    /// Processes that exited or left the tree since the last sweep.
    pub exited: Vec<(u32, String)>,
    /// Processes that could not be read for another reason (pid, why).
    pub unreadable: Vec<(u32, String)>,
    pub target: TargetState,
    /// Found new processes by listing /proc (else through `children`).
    pub listed: bool,
}

/// One page-table walk: the longest is the longest the target's memory
/// map was locked by leakwatch.
#[derive(Debug, Clone, PartialEq)]
pub struct Walk {
    pub pid: u32,
    pub comm: String,
    pub duration: Duration,
}

/// One deep pass over the tree.
#[derive(Debug, Default)]
pub struct DeepPass {
    /// `smaps` per mapping name of the processes asked for.
    pub mapping_rows: Vec<Row>,
    /// Processes whose deep read was refused (no ptrace-read access).
    pub denied: Vec<u32>,
    /// Page walks done (one per process read).
    pub walks: u64,
    /// Time spent reading `smaps`/`smaps_rollup`.
    pub cost: Duration,
    pub longest: Option<Walk>,
}

/// Finding new processes by listing /proc: the pids listed before that are
/// not in the tree, with their directory's inode number (a reused pid gets
/// a new one), so that only pids not listed before cost a read.
#[derive(Debug, Default)]
struct Listing {
    on: bool,
    /// Set by tests and benches: always (`Some(true)`) or never list.
    forced: Option<bool>,
    /// The listing of the last sweep that listed (the `foreign` pids are
    /// only valid then).
    primed: bool,
    foreign: HashMap<u32, u64>,
    /// /proc entries at the last listing (none yet: not needed while the
    /// tree is one or two processes), and pids read because they were new:
    /// what a listing costs.
    entries: Option<usize>,
    probes: usize,
    /// A listing `choose_listing` took to count the entries, for the sweep
    /// that asked (one listing a sweep, not two).
    taken: Option<Vec<(u32, u64)>>,
}

/// /proc entries a listing reads for the cost of one `children` read
/// (openat, read, close), priced a tick apart (cold caches, as a sampler
/// wakes), not in a tight loop. Set higher, a tree of a few hundred
/// processes is listed where its `children` reads cost less (measured:
/// docs/performance.md#listing-proc-or-reading-children).
const ENTRIES_PER_READ: usize = 5;

/// The attached process and its descendants, followed as they come and go.
pub struct Tree {
    root: ProcRoot,
    target: u32,
    skip: Option<u32>,
    members: BTreeMap<u32, Member>,
    proc_dir: Option<Dir>,
    listing: Listing,
    sweeps: u64,
    buf: Vec<u8>,
    kids: Vec<u32>,
}

impl Tree {
    /// Starts following `target` (leaving out `skip` and its descendants:
    /// leakwatch itself when it runs inside the tree).
    pub fn new(root: ProcRoot, target: u32, skip: Option<u32>) -> Result<Tree, ProcError> {
        raise_fd_limit();
        let proc_dir = Dir::open(
            root.dir(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok();
        let mut tree = Tree {
            root,
            target,
            skip,
            members: BTreeMap::new(),
            proc_dir,
            listing: Listing::default(),
            sweeps: 0,
            buf: Vec::with_capacity(4096),
            kids: Vec::new(),
        };
        let member = tree.admit(target)?;
        tree.members.insert(target, member);
        Ok(tree)
    }

    /// The attached process's start time (clock ticks since boot).
    pub fn target_start_time(&self) -> Option<u64> {
        self.members.get(&self.target).map(|m| m.start_time)
    }

    /// Processes followed now (live, zombie or unreadable), by pid.
    pub fn members(&self) -> impl Iterator<Item = (u32, &Member)> {
        self.members.iter().map(|(&pid, m)| (pid, m))
    }

    /// Sweeps so far.
    pub fn sweeps(&self) -> u64 {
        self.sweeps
    }

    /// Always (`Some(true)`) or never (`Some(false)`) find new processes by
    /// listing /proc; `None`: whichever costs fewer reads.
    pub fn force_listing(&mut self, listing: Option<bool>) {
        self.listing.forced = listing;
    }

    /// The cheap tier of every process: one `status` read and one `stat()`
    /// call each, plus finding the processes that joined.
    pub fn sweep(&mut self, ctx: &Context, scope: Scope) -> Sweep {
        self.sweeps += 1;
        let mut out = Sweep::default();
        let listed = self.choose_listing();
        let taken = self.listing.taken.take();
        let listing = match taken {
            Some(listing) if listed => listing,
            _ if listed => self.list(),
            _ => Vec::new(),
        };
        self.read_members(&mut out);
        match self.members.get(&self.target).map(|m| m.state) {
            Some(State::Live | State::Unreadable) => {}
            _ => {
                out.target = self.target_fate();
                return out;
            }
        }
        if listed && self.listing.primed {
            self.discover_by_listing(&listing, &mut out);
        } else {
            self.discover_by_children(&mut out);
            if listed {
                // Listings find new processes from the next sweep on: the
                // `children` files go unread, and are not held.
                for m in self.members.values_mut() {
                    m.dir.release_children();
                }
            }
        }
        if listed {
            self.remember_foreign(&listing);
        }
        self.listing.primed = listed;
        out.listed = listed;
        out.rows = self
            .members
            .iter()
            .filter(|(_, m)| m.is_live())
            .map(|(&pid, m)| {
                let who = Who {
                    pid,
                    ppid: m.status.ppid,
                    start_time: m.start_time,
                    comm: &m.status.name,
                };
                cheap_row(ctx, scope, who, &m.status, m.fds)
            })
            .collect();
        out
    }

    /// Reads every member; the ones gone are dropped (their exit noted
    /// unless already seen as zombies).
    fn read_members(&mut self, out: &mut Sweep) {
        let mut gone = Vec::new();
        for (&pid, m) in &mut self.members {
            m.reached = false;
            match read_cheap(m, &mut self.buf) {
                Ok(()) if m.status.is_zombie() || m.status.rss_bytes.is_none() => {
                    if m.state == State::Live {
                        out.exited.push((pid, m.status.name.clone()));
                    }
                    m.state = State::Zombie;
                }
                Ok(()) => m.state = State::Live,
                Err(e) if e.is_gone() => gone.push(pid),
                Err(e) => {
                    m.state = State::Unreadable;
                    out.unreadable.push((pid, e.to_string()));
                }
            }
        }
        for pid in gone {
            if let Some(m) = self.members.remove(&pid)
                && m.state == State::Live
            {
                out.exited.push((pid, m.status.name));
            }
        }
    }

    /// The target exited: did its pid go to another process?
    fn target_fate(&mut self) -> TargetState {
        match self.root.stat(self.target) {
            Ok(s) if s.state != 'Z' && Some(s.start_time) != self.target_start_time() => {
                TargetState::Replaced(s.comm)
            }
            _ => TargetState::Exited,
        }
    }

    /// Walks down from the target through `children` files, admitting
    /// processes not followed yet; members not reached left the tree.
    fn discover_by_children(&mut self, out: &mut Sweep) {
        let mut queue = vec![self.target];
        if let Some(m) = self.members.get_mut(&self.target) {
            m.reached = true;
        }
        let mut kids = std::mem::take(&mut self.kids);
        while let Some(pid) = queue.pop() {
            let Some(m) = self.members.get(&pid).filter(|m| m.state != State::Zombie) else {
                continue;
            };
            if m.dir
                .children(m.status.threads, &mut self.buf, &mut kids)
                .is_err()
            {
                continue;
            }
            for &child in &kids {
                if Some(child) == self.skip {
                    continue;
                }
                match self.members.get_mut(&child) {
                    Some(c) if c.reached => {}
                    Some(c) => {
                        c.reached = true;
                        queue.push(child);
                    }
                    None => {
                        if self.join(child, out) {
                            queue.push(child);
                        }
                    }
                }
            }
        }
        self.kids = kids;
        let left: Vec<u32> = self
            .members
            .iter()
            .filter(|(_, m)| !m.reached)
            .map(|(&pid, _)| pid)
            .collect();
        self.drop_members(&left, out);
    }

    /// Members whose parent is no member left the tree (their parent exited
    /// and they were re-parented); pids listed for the first time (or with
    /// a new inode: a reused pid) join when their parent is a member.
    fn discover_by_listing(&mut self, listing: &[(u32, u64)], out: &mut Sweep) {
        loop {
            let left: Vec<u32> = self
                .members
                .iter()
                .filter(|&(&pid, m)| {
                    pid != self.target
                        && m.state != State::Unreadable
                        && !self.members.contains_key(&m.status.ppid)
                })
                .map(|(&pid, _)| pid)
                .collect();
            if left.is_empty() {
                break;
            }
            self.drop_members(&left, out);
        }
        let mut candidates: Vec<(u32, u32)> = Vec::new();
        self.listing.probes = 0;
        for &(pid, ino) in listing {
            if self.members.contains_key(&pid)
                || Some(pid) == self.skip
                || self.listing.foreign.get(&pid) == Some(&ino)
            {
                continue;
            }
            self.listing.probes += 1;
            if let Ok(stat) = self.root.stat(pid) {
                candidates.push((pid, stat.ppid));
            }
        }
        // Parents before children, whatever order /proc lists them in.
        let mut joined = true;
        while joined {
            joined = false;
            for &(pid, ppid) in &candidates {
                if !self.members.contains_key(&pid)
                    && self.members.contains_key(&ppid)
                    && self.join(pid, out)
                {
                    joined = true;
                }
            }
        }
    }

    /// Admits a process found this sweep; false if it could not be read.
    fn join(&mut self, pid: u32, out: &mut Sweep) -> bool {
        match self.admit(pid) {
            Ok(m) => {
                if self.sweeps > 1 && m.is_live() {
                    out.started.push((pid, m.status.name.clone()));
                }
                self.members.insert(pid, m);
                true
            }
            Err(_) => false,
        }
    }

    fn drop_members(&mut self, pids: &[u32], out: &mut Sweep) {
        for pid in pids {
            if let Some(m) = self.members.remove(pid)
                && m.state == State::Live
            {
                out.exited.push((*pid, m.status.name));
            }
        }
    }

    /// Opens and reads a process for the first time: its start time from
    /// `stat`, then the cheap tier.
    fn admit(&mut self, pid: u32) -> Result<Member, ProcError> {
        let dir = self.root.open_dir(pid)?.hold_files();
        let stat = dir.stat(&mut self.buf)?;
        let mut m = Member {
            dir,
            start_time: stat.start_time,
            status: Status::default(),
            fds: None,
            first_rss_bytes: 0,
            found_at: self.sweeps.max(1),
            state: State::Live,
            reached: true,
        };
        read_cheap(&mut m, &mut self.buf)?;
        if m.status.is_zombie() || m.status.rss_bytes.is_none() {
            m.state = State::Zombie;
        }
        m.first_rss_bytes = m.status.rss_bytes.unwrap_or(0);
        Ok(m)
    }

    /// Whether to find new processes by listing /proc this sweep: when
    /// reading every member's `children` costs more reads than a listing
    /// (`ENTRIES_PER_READ` entries cost one read) and the pids it has to read.
    fn choose_listing(&mut self) -> bool {
        if let Some(forced) = self.listing.forced {
            self.listing.on = forced && self.proc_dir.is_some();
            return self.listing.on;
        }
        let children: usize = self
            .members
            .values()
            .filter(|m| m.state == State::Live)
            .map(Member::children_reads)
            .sum();
        if children <= 2 {
            // No listing costs less than one or two reads.
            self.listing.on = false;
            return false;
        }
        let entries = match self.listing.entries {
            Some(n) => n,
            None => {
                let listing = self.list();
                let n = listing.len();
                self.listing.taken = Some(listing);
                n
            }
        };
        let listing = entries / ENTRIES_PER_READ + self.listing.probes + 1;
        // Hysteresis: switch only when the other way is clearly cheaper.
        self.listing.on = self.proc_dir.is_some()
            && if self.listing.on {
                2 * children >= listing
            } else {
                children > 2 * listing
            };
        self.listing.on
    }

    /// The pids /proc lists now, with their directory's inode number.
    fn list(&mut self) -> Vec<(u32, u64)> {
        let Some(dir) = &mut self.proc_dir else {
            return Vec::new();
        };
        let listing: Vec<(u32, u64)> = dir
            .iter()
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let pid = entry.file_name().to_str().ok()?.parse().ok()?;
                Some((pid, entry.ino()))
            })
            .collect();
        self.listing.entries = Some(listing.len());
        listing
    }

    /// Every pid listed that is not a member is foreign until it is listed
    /// with another inode.
    fn remember_foreign(&mut self, listing: &[(u32, u64)]) {
        self.listing.foreign.clear();
        self.listing.foreign.extend(
            listing
                .iter()
                .filter(|(pid, _)| !self.members.contains_key(pid))
                .copied(),
        );
        self.listing.foreign.shrink_to(listing.len() * 2);
    }

    /// The deep tier of every live process in `rows` (upgraded in place):
    /// `smaps` for the pids in `mapped` (its sums give the rollup's figures
    /// and its mappings come as rows), `smaps_rollup` for the others — one
    /// page walk per process either way.
    pub fn deep(
        &mut self,
        rows: &mut [Row],
        mapped: &BTreeSet<u32>,
        ctx: &Context,
        scope: Scope,
    ) -> DeepPass {
        let mut pass = DeepPass::default();
        for row in rows.iter_mut().filter(|r| r.tier == Tier::Cheap) {
            let Some(m) = self.members.get(&row.pid).filter(|m| m.is_live()) else {
                continue;
            };
            let want_maps = mapped.contains(&row.pid);
            let t0 = Instant::now();
            let read = if want_maps {
                m.dir.smaps(&mut self.buf).map(|s| (s.rollup, s.mappings))
            } else {
                m.dir.smaps_rollup(&mut self.buf).map(|r| (r, Vec::new()))
            };
            let took = t0.elapsed();
            pass.cost += took;
            match read {
                Ok((rollup, maps)) => {
                    pass.walks += 1;
                    if pass.longest.as_ref().is_none_or(|w| took > w.duration) {
                        pass.longest = Some(Walk {
                            pid: row.pid,
                            comm: row.comm.clone(),
                            duration: took,
                        });
                    }
                    fill_deep(row, &rollup);
                    pass.mapping_rows.extend(
                        maps.iter()
                            .filter(|m| m.rss_bytes > 0 || m.swap_bytes > 0)
                            .map(|map| {
                                mapping_row(ctx, scope, row.pid, row.ppid, row.start_time, map)
                            }),
                    );
                }
                Err(ProcError::PermissionDenied { .. }) => pass.denied.push(row.pid),
                // Gone since the sweep, or unreadable: the cheap row stands.
                Err(_) => {}
            }
        }
        pass
    }
}

/// `status` and the fd count of a member; a member read through paths
/// (no descriptor to spare) checks its start time, as a held directory
/// need not.
fn read_cheap(m: &mut Member, buf: &mut Vec<u8>) -> Result<(), ProcError> {
    if !m.dir.holds_identity() && m.dir.stat(buf)?.start_time != m.start_time {
        return Err(ProcError::Gone {
            pid: m.dir.pid(),
            path: "stat".into(),
        });
    }
    m.dir.status(buf, &mut m.status)?;
    m.fds = m.dir.fd_count();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::procfs::fake::{FakeProc, HEAP_SMAPS};
    use crate::sample::rows::Clock;

    /// 10 → 20, 21; 20 → 30; and 99, a process outside the tree.
    fn tree_of_four() -> FakeProc {
        let fake = FakeProc::new();
        fake.process(10, 1, 'S', &[(10, &[20, 21])])
            .process(20, 10, 'S', &[(20, &[30])])
            .process(21, 10, 'S', &[(21, &[])])
            .process(30, 20, 'S', &[(30, &[])])
            .process(99, 1, 'S', &[(99, &[])]);
        fake
    }

    fn pids(sweep: &Sweep) -> Vec<u32> {
        sweep.rows.iter().map(|r| r.pid).collect()
    }

    fn events(list: &[(u32, String)]) -> Vec<u32> {
        let mut pids: Vec<u32> = list.iter().map(|(p, _)| *p).collect();
        pids.sort_unstable();
        pids
    }

    /// The same story told to both ways of finding processes: a worker
    /// exits, another starts, a zombie waits for its parent, a subtree is
    /// re-parented away, and the tree never takes in a stranger.
    fn churn(listing: bool) {
        let fake = tree_of_four();
        let mut tree = Tree::new(fake.root(), 10, None).unwrap();
        tree.force_listing(Some(listing));
        let mut clock = Clock::new();
        let first = tree.sweep(&clock.context(None), Scope::Target);
        assert_eq!(pids(&first), vec![10, 20, 21, 30]);
        assert!(first.started.is_empty() && first.exited.is_empty());
        assert_eq!(first.rows[1].ppid, 10);
        assert_eq!(first.rows[1].start_time, 1020);
        assert_eq!(first.rows[1].comm, "proc 20");
        assert_eq!(first.rows[1].rss_bytes, Some(156_300 * 1024));

        // 30 exits and is reaped; 21 forks 31.
        fake.remove(30)
            .process(20, 10, 'S', &[(20, &[])])
            .process(21, 10, 'S', &[(21, &[31])])
            .process(31, 21, 'S', &[(31, &[])]);
        let second = tree.sweep(&clock.context(None), Scope::Target);
        assert_eq!(second.listed, listing);
        assert_eq!(pids(&second), vec![10, 20, 21, 31]);
        assert_eq!(events(&second.started), vec![31]);
        assert_eq!(events(&second.exited), vec![30]);

        // 31 exits, unreaped: a zombie, told once, no row, never "started".
        fake.process(31, 21, 'Z', &[(31, &[])]);
        let third = tree.sweep(&clock.context(None), Scope::Target);
        assert_eq!(pids(&third), vec![10, 20, 21]);
        assert_eq!(events(&third.exited), vec![31]);
        let fourth = tree.sweep(&clock.context(None), Scope::Target);
        assert!(fourth.exited.is_empty() && fourth.started.is_empty());

        // 20 forks 40 and exits; 40 is re-parented to init: out of the tree.
        fake.remove(20)
            .process(10, 1, 'S', &[(10, &[21])])
            .process(40, 1, 'S', &[(40, &[])]);
        let fifth = tree.sweep(&clock.context(None), Scope::Target);
        assert_eq!(pids(&fifth), vec![10, 21]);
        assert_eq!(events(&fifth.exited), vec![20]);
        assert!(fifth.started.is_empty(), "{:?}", fifth.started);
        assert!(tree.members().all(|(pid, _)| pid != 99 && pid != 40));
    }

    #[test]
    fn processes_are_followed_through_children_files() {
        churn(false);
    }

    #[test]
    fn processes_are_followed_by_listing_proc() {
        churn(true);
    }

    #[test]
    fn leakwatch_itself_is_left_out() {
        let fake = tree_of_four();
        let mut tree = Tree::new(fake.root(), 10, Some(20)).unwrap();
        for listing in [false, true, true] {
            tree.force_listing(Some(listing));
            let sweep = tree.sweep(&Clock::new().context(None), Scope::Target);
            assert_eq!(pids(&sweep), vec![10, 21]);
        }
    }

    #[test]
    fn the_targets_end_is_told_apart_from_its_pid_reused() {
        let fake = tree_of_four();
        let mut tree = Tree::new(fake.root(), 10, None).unwrap();
        let ctx = Clock::new().context(None);
        assert_eq!(tree.sweep(&ctx, Scope::Target).target, TargetState::Alive);
        fake.process(10, 1, 'Z', &[(10, &[])]);
        assert_eq!(tree.sweep(&ctx, Scope::Target).target, TargetState::Exited);

        let mut tree = Tree::new(fake.root(), 21, None).unwrap();
        fake.remove(21).process(21, 1, 'S', &[(21, &[])]).file(
            21,
            "stat",
            "21 (new) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77777 0 0",
        );
        let sweep = tree.sweep(&ctx, Scope::Target);
        assert_eq!(sweep.target, TargetState::Replaced("new".into()));
        assert!(sweep.rows.is_empty());
    }

    #[test]
    fn a_deep_pass_walks_each_process_once() {
        let fake = tree_of_four();
        fake.file(20, "smaps", HEAP_SMAPS);
        let mut tree = Tree::new(fake.root(), 10, None).unwrap();
        let ctx = Clock::new().context(None);
        let mut rows = tree.sweep(&ctx, Scope::Target).rows;
        let mapped = BTreeSet::from([20]);
        let pass = tree.deep(&mut rows, &mapped, &ctx, Scope::Target);
        assert_eq!(pass.walks, 4);
        assert!(rows.iter().all(|r| r.tier == Tier::Deep));
        // 20's figures come from its smaps, the others' from smaps_rollup.
        assert_eq!(rows[1].pss_bytes, Some(1000 * 1024));
        assert_eq!(rows[1].pss_anon_bytes, Some(1000 * 1024));
        assert_eq!(rows[0].pss_bytes, Some(150_000 * 1024));
        assert_eq!(pass.mapping_rows.len(), 1);
        assert_eq!(pass.mapping_rows[0].comm, "[heap]");
        assert_eq!(pass.mapping_rows[0].tier, Tier::Mapping);
        assert!(pass.longest.is_some());
        // A process that exits between the sweep and the walk keeps its
        // cheap row.
        let mut rows = tree.sweep(&ctx, Scope::Target).rows;
        fake.file(30, "smaps_rollup", "");
        let pass = tree.deep(&mut rows, &BTreeSet::new(), &ctx, Scope::Target);
        assert_eq!(pass.walks, 3);
        assert_eq!(rows[3].tier, Tier::Cheap);
    }

    #[test]
    fn a_real_tree_is_found_both_ways() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .unwrap();
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(200));
        let mut found = Vec::new();
        for listing in [false, true, true] {
            let mut tree = Tree::new(ProcRoot::default(), pid, None).unwrap();
            tree.force_listing(Some(listing));
            let ctx = Clock::new().context(None);
            let mut sweep = tree.sweep(&ctx, Scope::Target);
            if listing {
                sweep = tree.sweep(&ctx, Scope::Target);
            }
            assert!(sweep.rows.iter().all(|r| r.fds.is_some()));
            found.push(pids(&sweep));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found[0].len(), 3, "{found:?}");
        assert!(found.iter().all(|f| f == &found[0]), "{found:?}");
    }
}
