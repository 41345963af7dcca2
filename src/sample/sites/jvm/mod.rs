//! Which Java classes grow (`--jvm-classes`): each followed JVM's class
//! histogram (`GC.class_histogram`: live instances and bytes per class,
//! counted after a full collection), asked through HotSpot's attach socket
//! ([`attach`]) by leakwatch itself, read as `Tier::Type` rows that are
//! fitted and judged like Python's types.
//!
//! A histogram stops the JVM for a full collection and the heap walk, so it
//! is asked off the sampling path (a thread per JVM) and, while attached,
//! only while the pauses so far stay within [`PAUSE_BUDGET`] of the time
//! since the first: a JVM pausing 200 ms per histogram is asked at most
//! every 20 s. In `run` mode it is asked once per run, after the deep
//! sample (its collection must not show in that sample).
//!
//! A JVM that cannot be asked (no SIGQUIT handler, attach disabled, another
//! user's, an answer that is not a histogram) is noted once with why, and
//! again after an answer worked; its memory is judged as before.

pub mod attach;
pub mod histogram;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Collected, Sites};
use crate::sample::heap::fetcher::Fetcher;
use crate::sample::procfs::ProcRoot;
use crate::sample::rows::{Context, event_row};
use crate::store::{HISTOGRAM_ANON_EVENT, Row, Scope, SiteSource, Tier};

/// Largest share of wall time the histograms may pause a JVM while
/// attached (the same budget as `--node-inspector`'s full collections).
pub const PAUSE_BUDGET: f64 = 0.01;
/// Classes kept per histogram, largest first: a leaking class enters the
/// table once it is among them (a class histogram of a large application
/// lists thousands, most of them a few instances).
pub const MAX_CLASSES: usize = 400;
/// How long one histogram may take (a full collection of a large heap).
pub const HISTOGRAM_TIMEOUT: Duration = Duration::from_secs(60);

/// A histogram, how long it took, and by how much the JVM's anon memory changed meanwhile
/// (bytes; `None` where its status could not be read before or after) with when it was
/// read after.
type Answered = (histogram::Histogram, Duration, Option<(i64, Instant)>);

/// One JVM asked for its histograms.
#[derive(Debug)]
struct Asked {
    fetcher: Fetcher<Answered>,
    comm: String,
    /// Histograms answered, their time in all and the longest.
    answers: u32,
    total: Duration,
    longest: Duration,
    first_asked: Option<Instant>,
    /// Said why the last ask failed (once, until one works).
    failing: bool,
    /// The anon memory the answered histograms grew, bytes in all (signed).
    anon_grew: i64,
}

impl Asked {
    fn start(root: ProcRoot, pid: u32, comm: String) -> Self {
        let jvm = attach::Jvm::new(root.clone(), pid);
        // Read just before the request and just after the answer: a histogram grows the
        // JVM's anon memory (new malloc arenas, the Attach Listener's stack, a page or two
        // each time after; docs/runtimes.md), and that growth is leakwatch's, not the program's.
        let anon = move || root.status(pid).ok().and_then(|s| s.anon_bytes);
        let fetcher = Fetcher::start("leakwatch-jvm", move |()| {
            let before = anon();
            let started = Instant::now();
            let text = jvm
                .jcmd("GC.class_histogram", HISTOGRAM_TIMEOUT)
                .map_err(|e| e.to_string())?;
            let took = started.elapsed();
            let grew = before
                .zip(anon())
                .map(|(b, a)| (signed(a) - signed(b), Instant::now()));
            let h = histogram::parse(&text, MAX_CLASSES)
                .map_err(|e| format!("its answer is not a class histogram: {e}"))?;
            Ok((h, took, grew))
        });
        Asked {
            fetcher,
            comm,
            answers: 0,
            total: Duration::ZERO,
            longest: Duration::ZERO,
            first_asked: None,
            failing: false,
            anon_grew: 0,
        }
    }

    /// Asks unless the pauses so far would exceed the budget (`always`:
    /// run mode's one per run).
    fn ask(&mut self, always: bool) {
        let first = *self.first_asked.get_or_insert_with(Instant::now);
        let elapsed = first.elapsed().as_secs_f64();
        let next = (self.total + self.longest).as_secs_f64();
        if always || self.answers == 0 || next <= PAUSE_BUDGET * elapsed {
            self.fetcher.ask(());
        }
    }
}

#[derive(Debug)]
enum Known {
    NotJvm,
    Jvm(Box<Asked>),
}

/// The class histograms of the JVMs followed.
#[derive(Debug)]
pub struct JvmClasses {
    root: ProcRoot,
    known: HashMap<(u32, u64), Known>,
    /// Ask once per collect (`run`), not within a budget (`attach`).
    every_time: bool,
}

impl JvmClasses {
    /// `every_time`: `run` mode's one histogram per run.
    pub fn new(root: ProcRoot, every_time: bool) -> Self {
        JvmClasses {
            root,
            known: HashMap::new(),
            every_time,
        }
    }

    /// Asks every JVM among `rows` (a batch's process rows) and takes what
    /// has come, waiting at most `wait` for each: type rows for the batch of
    /// `ctx`, and notes.
    pub fn read(&mut self, ctx: &Context, rows: &[Row], wait: Duration) -> Collected {
        let mut out = Collected::default();
        let mut alive = std::collections::HashSet::new();
        for process in rows
            .iter()
            .filter(|r| r.is_process_sample() && r.scope != Scope::Command)
        {
            let key = (process.pid, process.start_time);
            if !alive.insert(key) {
                continue;
            }
            let known = self
                .known
                .entry(key)
                .or_insert_with(|| discover(&self.root, process));
            let Known::Jvm(asked) = known else {
                continue;
            };
            asked.ask(self.every_time);
            let Some((_, answer)) = asked.fetcher.take(wait) else {
                continue;
            };
            match answer {
                Ok((h, took, grew)) => {
                    if asked.answers == 0 {
                        out.notes.push(format!(
                            "--jvm-classes: the JVM {} ({}) answered GC.class_histogram through \
                             its attach socket in {:.0} ms (a full collection: the JVM stops for \
                             most of it); {} classes, {} live instances",
                            process.pid,
                            asked.comm,
                            took.as_secs_f64() * 1000.0,
                            h.listed,
                            h.instances
                        ));
                    }
                    asked.answers += 1;
                    asked.total += took;
                    asked.longest = asked.longest.max(took);
                    asked.failing = false;
                    let now = ctx.now();
                    out.rows.extend(class_rows(&now, process, &h));
                    if let Some((grew, read)) = grew {
                        asked.anon_grew = asked.anon_grew.saturating_add(grew);
                        let mut row = event_row(
                            &now,
                            process.scope,
                            process.pid,
                            &process.comm,
                            &format!("{HISTOGRAM_ANON_EVENT} {grew}"),
                            None,
                        );
                        // At the time it was read: it shows in the samples after that.
                        row.t_seconds -= read.elapsed().as_secs_f64();
                        out.rows.push(row);
                    }
                }
                Err(why) if !asked.failing => {
                    asked.failing = true;
                    out.notes.push(format!(
                        "--jvm-classes: the JVM {} ({}) gave no class histogram: {why}; its \
                         classes are not judged (its heap and memory are)",
                        process.pid, asked.comm
                    ));
                }
                Err(_) => {}
            }
        }
        self.known.retain(|key, _| alive.contains(key));
        out
    }

    /// What the session asked of each JVM still followed, for the notes.
    pub fn finish(&mut self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .known
            .iter()
            .filter_map(|((pid, _), k)| match k {
                Known::Jvm(a) if a.answers > 0 => Some(format!(
                    "--jvm-classes: {pid} ({}): {}, the longest {:.0} ms, \
                     {:.1} s in all; its anon memory changed {} while they ran (leakwatch's \
                     own doing, which the verdicts allow for)",
                    a.comm,
                    crate::units::counted(a.answers, "class histogram", "class histograms"),
                    a.longest.as_secs_f64() * 1000.0,
                    a.total.as_secs_f64(),
                    crate::units::format_signed_bytes(a.anon_grew as f64)
                )),
                _ => None,
            })
            .collect();
        notes.sort();
        notes
    }
}

/// Bytes as a signed count (a status field past `i64::MAX` is not a real figure).
fn signed(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// A JVM (it maps `libjvm.so`) gets a thread that asks it; anything else
/// is not asked again.
fn discover(root: &ProcRoot, process: &Row) -> Known {
    match crate::sample::heap::maps_of(root, process.pid) {
        Some(m) if m.jvm => Known::Jvm(Box::new(Asked::start(
            root.clone(),
            process.pid,
            process.comm.clone(),
        ))),
        _ => Known::NotJvm,
    }
}

/// One type row per class: instances in `objects`, bytes in `site_bytes`.
fn class_rows<'a>(
    ctx: &'a Context,
    process: &'a Row,
    h: &'a histogram::Histogram,
) -> impl Iterator<Item = Row> + 'a {
    h.classes.iter().map(move |c| Row {
        pid: process.pid,
        ppid: process.ppid,
        start_time: process.start_time,
        comm: crate::escape::inert(&c.name).into_owned(),
        tier: Tier::Type,
        objects: Some(c.instances),
        site_bytes: Some(c.bytes),
        site_source: Some(SiteSource::Java),
        ..ctx.row(process.scope)
    })
}

impl Sites for JvmClasses {
    fn source(&self) -> SiteSource {
        SiteSource::Java
    }

    fn env(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        Vec::new()
    }

    fn collect(&mut self, ctx: &Context, sampled: &[Row], timeout: Duration) -> Collected {
        self.read(ctx, sampled, timeout)
    }

    fn finish(&mut self) -> Vec<String> {
        JvmClasses::finish(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    const STATUS: &str = "Name:\tjava\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nNSpid:\t4242\t7\n\
                          SigCgt:\t0000000000000000\n";
    const MAPS: &str =
        "7f0000000000-7f0000100000 r-xp 00000000 08:01 99 /usr/lib/jvm/lib/server/libjvm.so\n";

    /// A fake /proc with one JVM (pid 4242, 7 in its namespace, no SIGQUIT
    /// handler) whose attach socket answers `answer` to every request, then
    /// closes (or holds the connection open: `hold`).
    fn fake_jvm(answer: &'static [u8], hold: bool) -> (tempfile::TempDir, ProcRoot) {
        let dir = tempfile::tempdir().unwrap();
        let proc_dir = dir.path().join("4242");
        std::fs::create_dir_all(proc_dir.join("root/tmp")).unwrap();
        std::fs::write(proc_dir.join("status"), STATUS).unwrap();
        std::fs::write(proc_dir.join("maps"), MAPS).unwrap();
        let listener = UnixListener::bind(proc_dir.join("root/tmp/.java_pid7")).unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let mut request = [0u8; 64];
                let _ = s.read(&mut request);
                let _ = s.write_all(answer);
                if hold {
                    std::thread::sleep(Duration::from_secs(5));
                }
            }
        });
        let root = ProcRoot::new(dir.path());
        (dir, root)
    }

    fn process_row() -> Row {
        Row {
            pid: 4242,
            start_time: 1,
            comm: "java".into(),
            tier: Tier::Cheap,
            rss_bytes: Some(1 << 20),
            ..Row::new(Scope::Pid(4242))
        }
    }

    #[test]
    fn a_histogram_answered_is_one_type_row_per_class() {
        let answer = b"0\n num     #instances         #bytes  class name (module)\n\
            -----------------------------\n   1:   2000   48000  Leaky$Session\n\
            Total   2000   48000\n";
        let (_dir, root) = fake_jvm(answer, false);
        let mut classes = JvmClasses::new(root, true);
        let ctx = crate::sample::rows::Clock::new().context(Some(1));
        let got = classes.read(&ctx, &[process_row()], Duration::from_secs(5));
        assert_eq!(got.rows.len(), 1, "{:?}", got.notes);
        let row = &got.rows[0];
        assert_eq!((row.tier, row.comm.as_str()), (Tier::Type, "Leaky$Session"));
        assert_eq!((row.objects, row.site_bytes), (Some(2000), Some(48000)));
        assert_eq!(row.site_source, Some(SiteSource::Java));
        assert!(
            got.notes[0].contains("answered GC.class_histogram"),
            "{:?}",
            got.notes
        );
    }

    /// A histogram that grows the JVM's anon memory (its status rewritten as the request
    /// comes) is followed by an event row with the growth, at the time it was read; the
    /// session's note says it in all.
    #[test]
    fn what_a_histogram_grew_the_jvms_anon_memory_by_is_an_event_row() {
        let answer: &'static [u8] = b"0\n num     #instances         #bytes  class name\n\
            -----------------------------\n   1:   2000   48000  Leaky$Session\n\
            Total   2000   48000\n";
        let dir = tempfile::tempdir().unwrap();
        let proc_dir = dir.path().join("4242");
        std::fs::create_dir_all(proc_dir.join("root/tmp")).unwrap();
        let status = move |anon_kb: u64| format!("{STATUS}RssAnon:\t{anon_kb} kB\n");
        std::fs::write(proc_dir.join("status"), status(290_000)).unwrap();
        std::fs::write(proc_dir.join("maps"), MAPS).unwrap();
        let listener = UnixListener::bind(proc_dir.join("root/tmp/.java_pid7")).unwrap();
        let status_file = proc_dir.join("status");
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let mut request = [0u8; 64];
                let _ = s.read(&mut request);
                std::fs::write(&status_file, status(290_576)).unwrap();
                let _ = s.write_all(answer);
            }
        });
        let mut classes = JvmClasses::new(ProcRoot::new(dir.path()), true);
        let ctx = crate::sample::rows::Clock::new().context(Some(1));
        let got = classes.read(&ctx, &[process_row()], Duration::from_secs(5));
        let events: Vec<&Row> = got.rows.iter().filter(|r| r.tier == Tier::Event).collect();
        assert_eq!(events.len(), 1, "{:?}", got.rows);
        assert_eq!(
            events[0].event.as_deref(),
            Some(format!("{HISTOGRAM_ANON_EVENT} {}", 576 * 1024).as_str())
        );
        assert_eq!((events[0].pid, events[0].run), (4242, Some(1)));
        let notes = classes.finish();
        assert!(
            notes[0].contains("its anon memory changed +576 KiB"),
            "{notes:?}"
        );
    }

    #[test]
    fn garbage_a_cut_answer_or_silence_is_a_note_once_and_no_rows() {
        for (answer, hold, says) in [
            (
                &b"\x89PNG\r\n\x1a\n"[..],
                false,
                "does not begin with a result code",
            ),
            (
                &b"0\n num #instances #bytes class name\n   1: 5 10 Foo\n"[..],
                false,
                "no Total line",
            ),
            (&b"101\nNo such command\n"[..], false, "refused the command"),
            (&b""[..], true, "answered nothing"),
        ] {
            let (_dir, root) = fake_jvm(answer, hold);
            let mut classes = JvmClasses::new(root, true);
            let ctx = crate::sample::rows::Clock::new().context(Some(1));
            let got = classes.read(&ctx, &[process_row()], Duration::from_secs(3));
            if hold {
                // The fetch's own timeout is a minute: the run goes on.
                assert!(
                    got.rows.is_empty() && got.notes.is_empty(),
                    "{:?}",
                    got.notes
                );
                continue;
            }
            assert!(got.rows.is_empty());
            assert_eq!(got.notes.len(), 1, "{:?}", got.notes);
            assert!(got.notes[0].contains(says), "{:?}", got.notes);
            let again = classes.read(&ctx, &[process_row()], Duration::from_secs(3));
            assert!(again.notes.is_empty(), "said once: {:?}", again.notes);
        }
    }

    #[test]
    fn a_jvm_without_a_listener_that_ignores_sigquit_is_never_signalled() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("4242/root/tmp")).unwrap();
        std::fs::write(dir.path().join("4242/status"), STATUS).unwrap();
        let jvm = attach::Jvm::new(ProcRoot::new(dir.path()), 4242);
        let err = jvm.jcmd("GC.class_histogram", Duration::from_secs(1));
        assert!(
            matches!(err, Err(attach::AttachError::NoSigquit)),
            "{err:?}"
        );
    }
}
