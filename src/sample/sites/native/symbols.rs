//! Names native return addresses, in leakwatch and not in the target: the
//! process' `/proc/PID/maps` gives the file and offset of each address, the
//! file's segments turn that into the address the ELF states, and its DWARF
//! (function, file:line, inlined frames) or else its symbol table (`.symtab`,
//! or `.dynsym` in a stripped binary) names it; C++ and Rust (legacy and v0)
//! names demangled. Nothing named: `module+0xOFFSET`.
//!
//! Files are loaded once per session, keyed by path, device and inode (a
//! rebuilt binary at the same path is another file).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment};

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

/// One line of `/proc/PID/maps` that maps a file.
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
}

impl Module {
    fn load(path: &Path) -> Module {
        let segments = fs::read(path)
            .ok()
            .and_then(|data| {
                let file = object::File::parse(&*data).ok()?;
                Some(
                    file.segments()
                        .map(|s| {
                            let (off, size) = s.file_range();
                            (off, size, s.address())
                        })
                        .collect(),
                )
            })
            .unwrap_or_default();
        Module {
            loader: addr2line::Loader::new(path).ok(),
            segments,
        }
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

/// Names addresses of the processes of one session.
#[derive(Default)]
pub struct Symbolizer {
    modules: HashMap<(PathBuf, String, u64), Module>,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("modules", &self.modules.len())
            .finish()
    }
}

/// What one process maps, read once per answer.
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
        // The process' own view of the file, even if it was replaced on disk
        // since (map_files needs ptrace access; the path is the fallback).
        let key = (PathBuf::from(&m.path), m.dev.clone(), m.inode);
        let module = self.modules.entry(key).or_insert_with(|| {
            let own = PathBuf::from(format!(
                "/proc/{}/map_files/{:x}-{:x}",
                maps.pid, m.start, m.end
            ));
            let module = Module::load(&own);
            if module.loader.is_some() {
                module
            } else {
                Module::load(Path::new(&m.path))
            }
        });
        match module.stated(offset) {
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
