//! Names native return addresses, in leakwatch and not in the target: the
//! process' `/proc/PID/maps` gives the file and offset of each address, the
//! file's segments turn that into the address the ELF states, and its DWARF
//! (function, file:line, inlined frames) or else its symbol table (`.symtab`,
//! or `.dynsym` in a stripped binary) names it; C++ and Rust (legacy and v0)
//! names demangled. Nothing named: `module+0xOFFSET`.
//!
//! Files are loaded once per session, keyed by path, device and inode (a
//! rebuilt binary at the same path is another file): the process' own view
//! of the file (`/proc/PID/map_files`, where leakwatch may read it), else
//! the path, only while it is still the file the process mapped (its
//! inode); the debug file `/usr/lib/debug/.build-id/` has for the file's
//! GNU build id names the frames when the file has no DWARF (stripped);
//! else the frame is `module+0xOFFSET`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSegment};

/// One frame, named as well as the file allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedFrame {
    /// Demangled function name, if known.
    pub function: Option<String>,
    /// `file:line` from DWARF, if known.
    pub location: Option<String>,
    /// The file's name (`libc.so.6`), or `[anon]` / `[vdso]`.
    pub module: String,
    /// Offset of the address in its file.
    pub offset: u64,
}

impl NamedFrame {
    /// `function (file:line)`, `function [module]` or `module+0xOFFSET`.
    pub fn display(&self) -> String {
        match (&self.function, &self.location) {
            (Some(f), Some(l)) => format!("{f} ({l})"),
            (Some(f), None) => format!("{f} [{}]", self.module),
            (None, Some(l)) => format!("{}+{:#x} ({l})", self.module, self.offset),
            (None, None) => format!("{}+{:#x}", self.module, self.offset),
        }
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    dev: String,
    inode: u64,
    path: String,
}

/// Parses `/proc/PID/maps` text: every mapping, sorted by start.
fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut maps: Vec<Mapping> = text
        .lines()
        .filter_map(|line| {
            let mut f = line.splitn(6, ' ');
            let (range, _perms, offset, dev, inode) =
                (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let path = f.next().unwrap_or("").trim_start().to_string();
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                dev: dev.to_string(),
                inode: inode.parse().ok()?,
                path,
            })
        })
        .collect();
    maps.sort_by_key(|m| m.start);
    maps
}

/// A loaded file: its DWARF and symbols, and its loadable segments as
/// (file offset, file size, stated address).
struct Module {
    loader: Option<addr2line::Loader>,
    segments: Vec<(u64, u64, u64)>,
    /// Whether the file has DWARF (`.debug_info`): a stripped binary has
    /// only its symbol table.
    dwarf: bool,
    /// Its GNU build id, lowercase hex.
    build_id: Option<String>,
}

impl Module {
    /// Nothing to name by: frames read `module+0xOFFSET`.
    fn none() -> Module {
        Module {
            loader: None,
            segments: Vec::new(),
            dwarf: false,
            build_id: None,
        }
    }

    /// `path`'s module if it is an ELF file whose build id is `build_id`
    /// (any, when `None`).
    fn load(path: &Path, build_id: Option<&str>) -> Option<Module> {
        let data = fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let has = file.build_id().ok().flatten().map(hex);
        if build_id.is_some_and(|want| has.as_deref() != Some(want)) {
            return None;
        }
        let segments = file
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, size, s.address())
            })
            .collect();
        let dwarf = file
            .section_by_name(".debug_info")
            .is_some_and(|s| s.size() > 0);
        Some(Module {
            loader: addr2line::Loader::new(path).ok(),
            segments,
            dwarf,
            build_id: has,
        })
    }

    /// The address the ELF states for file offset `off`.
    fn stated(&self, off: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(o, size, _)| (o..o + size).contains(&off))
            .map(|&(o, _, addr)| off - o + addr)
    }

    /// The frames at `probe`, innermost (inlined) first.
    fn name(&self, probe: u64, module: &str, offset: u64) -> Vec<NamedFrame> {
        let frame = |function: Option<String>, location: Option<String>| NamedFrame {
            function,
            location,
            module: module.to_string(),
            offset,
        };
        let Some(loader) = &self.loader else {
            return vec![frame(None, None)];
        };
        let mut out = Vec::new();
        if let Ok(mut frames) = loader.find_frames(probe) {
            while let Ok(Some(f)) = frames.next() {
                let function = f
                    .function
                    .as_ref()
                    .and_then(|n| n.demangle().ok())
                    .map(|n| n.into_owned());
                let location = f.location.and_then(|l| {
                    let file = l.file?;
                    Some(match l.line {
                        Some(line) => format!("{file}:{line}"),
                        None => file.to_string(),
                    })
                });
                out.push(frame(function, location));
            }
        }
        // No DWARF function: the symbol table names it (a stripped
        // binary keeps its exported functions in .dynsym).
        if out.iter().all(|f| f.function.is_none()) {
            let symbol = loader.find_symbol(probe).map(|s| {
                addr2line::demangle_auto(std::borrow::Cow::Borrowed(s), None).into_owned()
            });
            let location = out.first().and_then(|f| f.location.clone());
            out = vec![frame(symbol, location)];
        }
        out
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the debug file of build id `id` is, by the GNU convention
/// (`/usr/lib/debug/.build-id/ab/cdef….debug`).
fn debug_file(id: &str) -> Option<PathBuf> {
    let (dir, rest) = (id.get(..2)?, id.get(2..)?);
    (!rest.is_empty())
        .then(|| PathBuf::from(format!("/usr/lib/debug/.build-id/{dir}/{rest}.debug")))
}

/// What a loaded file is known by: its path, device and inode.
type Key = (PathBuf, String, u64);

/// Names addresses of the processes of one session.
#[derive(Default)]
pub struct Symbolizer {
    modules: HashMap<Key, Module>,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("modules", &self.modules.len())
            .finish()
    }
}

/// What one process maps, read once per snapshot.
pub struct ProcessMaps {
    pid: u32,
    maps: Vec<Mapping>,
}

impl ProcessMaps {
    /// `None` when the process is gone (nothing can be named then).
    pub fn read(pid: u32) -> Option<ProcessMaps> {
        let text = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        Some(ProcessMaps {
            pid,
            maps: parse_maps(&text),
        })
    }

    fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        self.maps[..i].last().filter(|m| addr < m.end)
    }
}

impl Symbolizer {
    /// The frames of one return address of `maps`' process, innermost first.
    /// A return address points after its call: the call is one byte before.
    pub fn name(&mut self, maps: &ProcessMaps, return_address: u64) -> Vec<NamedFrame> {
        let addr = return_address.saturating_sub(1);
        let Some(m) = maps.find(addr) else {
            return vec![NamedFrame {
                function: None,
                location: None,
                module: "[unmapped]".into(),
                offset: addr,
            }];
        };
        let offset = addr - m.start + m.offset;
        if !m.path.starts_with('/') {
            let module = if m.path.is_empty() {
                "[anon]".to_string()
            } else {
                m.path.clone()
            };
            return vec![NamedFrame {
                function: None,
                location: None,
                module,
                offset,
            }];
        }
        let module_name = Path::new(&m.path)
            .file_name()
            .map_or_else(|| m.path.clone(), |n| n.to_string_lossy().into_owned());
        let key = (PathBuf::from(&m.path), m.dev.clone(), m.inode);
        let module = self.modules.entry(key).or_insert_with(|| {
            // The process' own view of the file, even if it was replaced on
            // disk since (map_files needs ptrace access and a live process),
            // else the path while it is the file the process mapped. Without
            // DWARF (a stripped binary: its symbol table only) the debug
            // file of its build id names the frames when it has DWARF; the
            // mapped file's segments still give the stated addresses (a
            // debug file's hold no bytes).
            let own = PathBuf::from(format!(
                "/proc/{}/map_files/{:x}-{:x}",
                maps.pid, m.start, m.end
            ));
            let same_file = || {
                use std::os::unix::fs::MetadataExt;
                fs::metadata(&m.path).is_ok_and(|meta| meta.ino() == m.inode)
            };
            let loaded = |p: &Path, id: Option<&str>| {
                Module::load(p, id).filter(|module| module.loader.is_some())
            };
            let Some(module) = loaded(&own, None)
                .or_else(|| same_file().then(|| loaded(Path::new(&m.path), None))?)
            else {
                return Module::none();
            };
            if module.dwarf {
                return module;
            }
            let id = module.build_id.clone();
            let debug = id
                .as_deref()
                .and_then(|id| loaded(&debug_file(id)?, Some(id)));
            match debug.filter(|d| d.dwarf) {
                Some(d) => Module {
                    segments: module.segments,
                    ..d
                },
                None => module,
            }
        });
        let probe = module.stated(offset);
        match probe {
            Some(probe) => module.name(probe, &module_name, offset),
            None => vec![NamedFrame {
                function: None,
                location: None,
                module: module_name,
                offset,
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_are_parsed_and_searched_by_address() {
        let text = "\
5607b3176000-5607b3177000 r-xp 00001000 fe:00 10011117                   /tmp/leaky daemon
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]
5607b3175000-5607b3176000 r--p 00000000 fe:00 10011117                   /tmp/leaky daemon
";
        let maps = ProcessMaps {
            pid: 1,
            maps: parse_maps(text),
        };
        let m = maps.find(0x5607b3176738).unwrap();
        assert_eq!((m.offset, m.path.as_str()), (0x1000, "/tmp/leaky daemon"));
        assert_eq!(maps.find(0x7ffd1800).unwrap().path, "[stack]");
        assert!(maps.find(0x10).is_none());
        assert!(maps.find(0x5607b3177000).is_none(), "end is exclusive");
    }

    /// A function of this test binary, to be named by address.
    #[inline(never)]
    fn named_by_address(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    /// A frame is named from the file the process mapped; a file that is no
    /// longer it (another inode at the path: a rebuilt binary) names
    /// nothing, where it would name the wrong functions. The maps of a pid
    /// that does not exist have no `map_files` to fall back on.
    #[test]
    fn a_frame_is_named_from_the_mapped_file_and_never_from_another() {
        let addr = named_by_address as *const () as usize as u64;
        let mut maps = ProcessMaps::read(std::process::id()).unwrap();
        let frames = Symbolizer::default().name(&maps, addr + 1);
        assert!(
            frames.iter().any(|f| f
                .function
                .as_deref()
                .is_some_and(|n| n.contains("named_by_address"))),
            "{frames:?}"
        );
        maps.pid = u32::MAX;
        let i = maps
            .maps
            .iter()
            .position(|m| m.start <= addr && addr < m.end)
            .unwrap();
        maps.maps[i].inode += 1;
        let frames = Symbolizer::default().name(&maps, addr + 1);
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!(frames[0].function, None, "{frames:?}");
        assert!(frames[0].display().contains("+0x"), "{frames:?}");
    }

    #[test]
    fn frames_display_what_is_known() {
        let f = |function: Option<&str>, location: Option<&str>| NamedFrame {
            function: function.map(String::from),
            location: location.map(String::from),
            module: "memcached".into(),
            offset: 0x1a2b,
        };
        assert_eq!(
            f(Some("do_item_alloc"), Some("items.c:12")).display(),
            "do_item_alloc (items.c:12)"
        );
        assert_eq!(
            f(Some("slabs_alloc"), None).display(),
            "slabs_alloc [memcached]"
        );
        assert_eq!(f(None, None).display(), "memcached+0x1a2b");
    }
}
