//! A HotSpot JVM's heap from its hsperfdata counters (`hsperf`): nothing is
//! sent to the JVM, the file it maps for `jstat` is read.
//!
//! The counters (`sun.gc.*`, the names `jstat -gc` reads): each generation's
//! spaces with their `used`, `capacity` and `maxCapacity`; each collector's
//! `invocations`; the policy's name. From them, per process and sample:
//!
//! - `used`: every space's `used`, summed (jstat's EU + S0U + S1U + OU);
//! - `max`: the generations' `maxCapacity`, summed — but G1's young and old
//!   generations may each grow to the whole heap, so for G1 the largest;
//! - `live`, the heap after a collection, as Micrometer's
//!   `jvm.gc.live.data.size` means it, given at the first read after each
//!   collection (the collectors' invocations rose since the read before):
//!   - a generational collector (a space named `eden`: Serial, Parallel,
//!     G1): every space but eden. Ordinary allocation goes to eden and every
//!     collection, young or full, empties it, so what the other spaces hold
//!     is what survived the last collection (plus objects allocated straight
//!     into the old generation since: humongous arrays).
//!   - one space (ZGC before JDK 21, Shenandoah): `used` at that read. ZGC
//!     updates `used` only at its pauses, so it is `used` at the last
//!     cycle's pause; Shenandoah's includes what was allocated since.
//!
//! - `promoted`, for a generational collector, beside each `live`: what the
//!   old generation (`sun.gc.generation.1`) grew by since it was last seen
//!   to give anything back — a full collection ran (the old collector's
//!   `invocations`, `sun.gc.collector.1`, jstat's FGC) or its `used` fell (a
//!   G1 mixed collection) — or since the session's first read. Young
//!   collections promote what survived them, request-scoped objects
//!   included (Parallel's adaptive tenuring does, measured in
//!   docs/runtimes.md), and only a collection of the old generation frees
//!   them: so much of `live`'s growth may be garbage (`fit` widens the live
//!   heap's rate by it).
//!
//! The live heap is observed only when the collector runs: a series of it
//! has a point per collection, and a window without one says nothing of
//! what the program keeps (its `heap_used` grows, garbage included).

use super::hsperf::{PerfData, Value};

/// The counters leakwatch reads: the collectors' and spaces', the policy's
/// name, and the JVM's version (for the note).
pub fn wanted(name: &str) -> bool {
    if let Some(rest) = name.strip_prefix("sun.gc.") {
        return (rest.starts_with("generation.")
            && (rest.ends_with(".used")
                || rest.ends_with(".maxCapacity")
                || rest.ends_with(".name"))
            && !rest.contains(".agetable."))
            || (rest.starts_with("collector.")
                && (rest.ends_with(".invocations") || rest.ends_with(".name")))
            || rest == "policy.name";
    }
    name == "java.property.java.vm.version"
}

/// What one read of the counters says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub used: u64,
    pub max: Option<u64>,
    /// `used` of the eden space; `None` for a collector without one.
    pub eden_used: Option<u64>,
    /// Collections so far, all collectors together.
    pub collections: u64,
    /// Full collections so far: the old generation's collector
    /// (`sun.gc.collector.1`: Serial's MSC, Parallel's PSParallelCompact,
    /// G1's full collections).
    pub full_collections: u64,
    /// `used` of the old generation's spaces (`sun.gc.generation.1`), for a
    /// generational heap; `None` for one space (ZGC, Shenandoah).
    pub old_used: Option<u64>,
}

/// One JVM's heap in bytes: what a `heap` row carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub live: Option<u64>,
    pub used: u64,
    pub max: Option<u64>,
    /// Of `live`, what the old generation grew by since it last gave back
    /// (`Heap::update`): given with `live`, by a generational JVM only.
    pub promoted: Option<u64>,
}

/// Why counters are not a heap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CountersError {
    #[error("its hsperfdata file has no heap spaces (sun.gc.generation.*.space.*)")]
    NoSpaces,
    #[error("its hsperfdata file's heap counters disagree ({0})")]
    Inconsistent(&'static str),
}

fn non_negative(x: i64) -> Option<u64> {
    u64::try_from(x).ok()
}

/// The heap's counters in `data`.
pub fn counters(data: &PerfData) -> Result<Counters, CountersError> {
    let mut used: u64 = 0;
    let mut spaces = 0;
    let mut eden_used = None;
    let mut max_sum: u64 = 0;
    let mut max_largest: u64 = 0;
    let mut collections: u64 = 0;
    let mut full_collections: u64 = 0;
    let mut old_used: u64 = 0;
    // The eden space's `used` counter, by its name's counter.
    let eden = data.counters.iter().find_map(|(name, value)| match value {
        Value::Text(t) if t == "eden" => name.strip_suffix(".name").map(|p| format!("{p}.used")),
        _ => None,
    });
    for (name, value) in &data.counters {
        let Value::Long(value) = *value else { continue };
        if let Some(rest) = name.strip_prefix("sun.gc.generation.")
            && let Some((_, tail)) = rest.split_once('.')
        {
            if tail == "maxCapacity" {
                let m = non_negative(value).unwrap_or(0);
                max_sum = max_sum.saturating_add(m);
                max_largest = max_largest.max(m);
            } else if tail.starts_with("space.") && tail.ends_with(".used") {
                let u = non_negative(value)
                    .ok_or(CountersError::Inconsistent("a space's used is negative"))?;
                used = used.saturating_add(u);
                spaces += 1;
                if rest.starts_with("1.") {
                    old_used = old_used.saturating_add(u);
                }
                if eden.as_deref() == Some(name.as_str()) {
                    eden_used = Some(u);
                }
            }
        } else if name.starts_with("sun.gc.collector.") && name.ends_with(".invocations") {
            let n = non_negative(value).unwrap_or(0);
            collections = collections.saturating_add(n);
            if name == "sun.gc.collector.1.invocations" {
                full_collections = n;
            }
        }
    }
    if spaces == 0 {
        return Err(CountersError::NoSpaces);
    }
    let g1 = data.text("sun.gc.policy.name") == Some("GarbageFirst");
    let max = if g1 { max_largest } else { max_sum };
    Ok(Counters {
        used,
        max: (max > 0).then_some(max),
        eden_used,
        collections,
        full_collections,
        old_used: eden_used.is_some().then_some(old_used),
    })
}

/// A collector's name for people: `G1`, `Parallel`, `Serial`, `ZGC`,
/// `Shenandoah`, from the policy or the first collector's name.
pub fn collector(data: &PerfData) -> String {
    let policy = data.text("sun.gc.policy.name").unwrap_or("");
    let first = data.text("sun.gc.collector.0.name").unwrap_or("");
    let second = data.text("sun.gc.collector.2.name").unwrap_or("");
    let known = [
        ("GarbageFirst", "G1"),
        ("ParScav", "Parallel"),
        ("Copy:", "Serial"),
        ("Shenandoah", "Shenandoah"),
        ("Z ", "ZGC"),
    ];
    for (needle, name) in known {
        if policy.contains(needle) || first.starts_with(needle) || second.starts_with(needle) {
            return name.to_string();
        }
    }
    if policy.is_empty() {
        "an unnamed collector".to_string()
    } else {
        policy.to_string()
    }
}

/// One JVM's heap over successive reads: what `live` needs to remember.
#[derive(Debug, Clone, Default)]
pub struct Heap {
    last_collections: Option<u64>,
    /// Full collections at the last read.
    last_full: Option<u64>,
    /// The old generation's `used` at the last read.
    last_old: Option<u64>,
    /// The old generation's `used` where it last gave back (or at the first
    /// read): `promoted` counts from it.
    old_floor: Option<u64>,
}

impl Heap {
    /// The figures of this read. `live` only where it is news: at a read
    /// after a collection ended (the collectors' invocations rose since the
    /// read before), and for a generational heap at the first read too
    /// (what the spaces but eden hold is still what the last collection
    /// left). Between collections the live heap is not observed again — a
    /// repeat of the last figure would read as a flat heap however much the
    /// program keeps — so `None`.
    pub fn update(&mut self, c: &Counters) -> Figures {
        let collected = match self.last_collections {
            Some(n) => c.collections > n,
            None => c.collections > 0 && c.eden_used.is_some(),
        };
        self.last_collections = Some(c.collections);
        let promoted = self.promoted(c);
        let live = collected.then(|| match c.eden_used {
            Some(eden) => c.used.saturating_sub(eden),
            None => c.used,
        });
        Figures {
            live,
            used: c.used,
            max: c.max,
            promoted: live.and(promoted),
        }
    }

    /// What the old generation grew by since it last gave back: a full
    /// collection ran since the read before, or its `used` fell (a G1 mixed
    /// collection, an eagerly reclaimed humongous array), or this is the
    /// first read. Every read moves the floor, so a give-back between two
    /// live readings is not missed.
    fn promoted(&mut self, c: &Counters) -> Option<u64> {
        let old = c.old_used?;
        let full = self.last_full.is_some_and(|n| c.full_collections > n);
        let gave_back = self.last_old.is_some_and(|last| old < last);
        let floor = match self.old_floor {
            Some(floor) if !full && !gave_back => floor,
            _ => old,
        };
        self.last_full = Some(c.full_collections);
        self.last_old = Some(old);
        self.old_floor = Some(floor);
        Some(old.saturating_sub(floor))
    }
}

#[cfg(test)]
mod tests {
    use super::super::hsperf::{parse, tests::file};
    use super::*;

    fn space(g: u32, s: u32, name: &str, used: i64, max: i64) -> Vec<(String, Value)> {
        let p = format!("sun.gc.generation.{g}.space.{s}");
        vec![
            (format!("{p}.name"), Value::Text(name.into())),
            (format!("{p}.used"), Value::Long(used)),
            (format!("{p}.maxCapacity"), Value::Long(max)),
        ]
    }

    fn read(counters: Vec<(String, Value)>) -> PerfData {
        let refs: Vec<(&str, Value)> = counters
            .iter()
            .map(|(n, v)| (n.as_str(), v.clone()))
            .collect();
        parse(&file(&refs), wanted).unwrap()
    }

    const MIB: i64 = 1 << 20;

    fn g1(eden: i64, survivor: i64, old: i64, young_gcs: i64) -> PerfData {
        g1_full(eden, survivor, old, young_gcs, 0)
    }

    fn g1_full(eden: i64, survivor: i64, old: i64, young_gcs: i64, full_gcs: i64) -> PerfData {
        let mut c = vec![
            (
                "sun.gc.policy.name".into(),
                Value::Text("GarbageFirst".into()),
            ),
            (
                "sun.gc.collector.0.invocations".into(),
                Value::Long(young_gcs),
            ),
            (
                "sun.gc.collector.1.invocations".into(),
                Value::Long(full_gcs),
            ),
            (
                "sun.gc.generation.0.maxCapacity".into(),
                Value::Long(512 * MIB),
            ),
            (
                "sun.gc.generation.1.maxCapacity".into(),
                Value::Long(512 * MIB),
            ),
        ];
        c.extend(space(0, 0, "eden", eden, 512 * MIB));
        c.extend(space(0, 1, "s0", 0, 0));
        c.extend(space(0, 2, "s1", survivor, 512 * MIB));
        c.extend(space(1, 0, "space", old, 512 * MIB));
        read(c)
    }

    /// G1: what survived the last collection is every space but eden, given
    /// when a collection ran since the last read (and at the first read);
    /// the heap's maximum is one generation's (each may take the whole heap).
    #[test]
    fn a_generational_heaps_live_part_is_all_but_eden_after_each_collection() {
        let mut heap = Heap::default();
        let before = counters(&g1(20 * MIB, 0, 0, 0)).unwrap();
        assert_eq!(before.max, Some(512 << 20));
        assert_eq!(heap.update(&before).live, None);
        let after = counters(&g1(3 * MIB, 2 * MIB, 40 * MIB, 4)).unwrap();
        let f = heap.update(&after);
        assert_eq!((f.live, f.used), (Some(42 << 20), 45 << 20));
        let later = counters(&g1(9 * MIB, 2 * MIB, 40 * MIB, 4)).unwrap();
        assert_eq!(heap.update(&later).live, None, "no collection since");
        let mut fresh = Heap::default();
        assert_eq!(fresh.update(&later).live, Some(42 << 20), "the first read");
        assert_eq!(collector(&g1(0, 0, 0, 0)), "G1");
    }

    /// What the old generation grew by since it last gave back, beside each live figure:
    /// promotions accumulate until a full collection or a fall of the old generation (a G1
    /// mixed collection), counted from the first read; none between collections.
    #[test]
    fn the_old_generations_growth_since_it_last_gave_back_is_given_with_live() {
        let mut heap = Heap::default();
        let mut read = |old, young, full| {
            let f = heap.update(&counters(&g1_full(3 * MIB, MIB, old * MIB, young, full)).unwrap());
            (f.live.map(|l| l >> 20), f.promoted.map(|p| p >> 20))
        };
        assert_eq!(read(40, 4, 0), (Some(41), Some(0)), "the first read");
        assert_eq!(read(42, 5, 0), (Some(43), Some(2)));
        assert_eq!(read(42, 5, 0), (None, None), "no collection since");
        assert_eq!(read(45, 6, 0), (Some(46), Some(5)));
        assert_eq!(read(44, 7, 1), (Some(45), Some(0)), "a full collection");
        assert_eq!(read(47, 8, 1), (Some(48), Some(3)));
        assert_eq!(
            read(46, 9, 1),
            (Some(47), Some(0)),
            "the old generation gave back"
        );
        assert_eq!(read(50, 10, 1), (Some(51), Some(4)));
        let one_space = counters(&zgc(20 * MIB, 3)).unwrap();
        assert_eq!(one_space.old_used, None);
        let mut zheap = Heap::default();
        zheap.update(&one_space);
        let f = zheap.update(&counters(&zgc(22 * MIB, 4)).unwrap());
        assert_eq!((f.live, f.promoted), (Some(22 << 20), None));
    }

    fn zgc(used: i64, pauses: i64) -> PerfData {
        let mut c = vec![
            (
                "sun.gc.collector.2.name".into(),
                Value::Text("Z concurrent cycle pauses".into()),
            ),
            ("sun.gc.collector.2.invocations".into(), Value::Long(pauses)),
            (
                "sun.gc.generation.1.maxCapacity".into(),
                Value::Long(256 * MIB),
            ),
        ];
        c.extend(space(1, 0, "space", used, 256 * MIB));
        read(c)
    }

    /// One space: `used` at the first read after a collection ended; none
    /// at the first read (when the last one ended is not known).
    #[test]
    fn a_single_space_heaps_live_part_is_read_after_each_collection() {
        let mut heap = Heap::default();
        let mut live = |used, pauses| heap.update(&counters(&zgc(used, pauses)).unwrap()).live;
        assert_eq!(live(30 * MIB, 6), None);
        assert_eq!(live(34 * MIB, 6), None);
        assert_eq!(live(12 * MIB, 9), Some(12 << 20));
        assert_eq!(live(20 * MIB, 9), None);
        assert_eq!(live(14 * MIB, 12), Some(14 << 20));
        assert_eq!(collector(&zgc(0, 0)), "ZGC");
    }

    #[test]
    fn counters_without_spaces_or_with_negative_use_are_refused() {
        let none = read(vec![(
            "sun.gc.collector.0.invocations".into(),
            Value::Long(1),
        )]);
        assert_eq!(counters(&none), Err(CountersError::NoSpaces));
        let negative = read(space(1, 0, "space", -5, 10));
        assert!(matches!(
            counters(&negative),
            Err(CountersError::Inconsistent(_))
        ));
    }
}
