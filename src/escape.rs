//! Text from outside made inert for terminals and files: what a process
//! names itself, its command line, a mapping's path, a cgroup path, a
//! Prometheus label, a Python file name or source line. Control characters
//! — C0 (0x00–0x1f), DEL (0x7f), C1 (U+0080–U+009F, whose 0x9b is a CSI to
//! many terminals) — and bytes that are not UTF-8 are shown as `\xNN`, one
//! per byte, as `ls -b` and `ps` do; everything else, `\` included, stays as
//! it is, so names stay recognisable and escaping twice changes nothing.
//!
//! Where it is applied: where bytes from outside become text (the /proc
//! readers, the Prometheus source), where samples.csv is written and read
//! (so a `report` of a planted file is inert too, and rebuilds the same
//! escaped text), and on the way to stderr. Not reversible: a name that
//! holds the four characters `\x1b` reads like one that held ESC.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is shown escaped.
fn is_control(c: char) -> bool {
    matches!(c, '\0'..='\x1f' | '\x7f' | '\u{80}'..='\u{9f}')
}

/// `text` with every control character escaped (newlines too).
pub fn inert(text: &str) -> Cow<'_, str> {
    escape_str(text, false)
}

/// `text` with every control character escaped but the newline: for text
/// of several lines (leakwatch's own messages, a traceback one frame a line).
pub fn inert_lines(text: &str) -> Cow<'_, str> {
    escape_str(text, true)
}

/// Text for the terminal: as `inert_lines`, but a colour sequence (SGR,
/// `ESC [ digits;… m`) passes, as `less -R` lets it: leakwatch colours its
/// own verdict line. Text from outside never holds a raw one by then (it is
/// made inert where it is read), and SGR cannot retitle, clear or move.
pub fn inert_terminal(text: &str) -> Cow<'_, str> {
    if !text.contains('\x1b') {
        return inert_lines(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text;
    while let Some(at) = rest.find('\x1b') {
        out.push_str(&inert_lines(&rest[..at]));
        let seq = &rest[at..];
        let sgr_len = seq.strip_prefix("\x1b[").and_then(|body| {
            let params = body.find(|c: char| !(c.is_ascii_digit() || c == ';'))?;
            (body.as_bytes()[params] == b'm').then_some(2 + params + 1)
        });
        match sgr_len {
            Some(len) => {
                out.push_str(&seq[..len]);
                rest = &seq[len..];
            }
            None => {
                out.push_str("\\x1b");
                rest = &seq[1..];
            }
        }
    }
    out.push_str(&inert_lines(rest));
    Cow::Owned(out)
}

fn escape_str(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    let escaped = |c: char| is_control(c) && !(keep_newlines && c == '\n');
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            push_bytes(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Bytes from outside as inert text: valid UTF-8 as `inert`, every byte
/// that is not part of a valid character as `\xNN`.
pub fn inert_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(&inert(chunk.valid()));
        push_bytes(&mut out, chunk.invalid());
    }
    out
}

fn push_bytes(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        let _ = write!(out, "\\x{b:02x}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bad_bytes_are_shown_escaped_and_names_stay_readable() {
        assert_eq!(inert("\x1b]0;pwn\x07\x1b[2J"), r"\x1b]0;pwn\x07\x1b[2J");
        assert_eq!(inert("a\tb\nc\x7f"), r"a\x09b\x0ac\x7f");
        // U+009B, the one-character CSI, is its two UTF-8 bytes.
        assert_eq!(inert("x\u{9b}31m"), r"x\xc2\x9b31m");
        assert_eq!(inert_lines("one\ntwo\x1b"), "one\ntwo\\x1b");
        assert_eq!(
            inert_bytes(b"map\x1b[31mred\xff\x9b.so"),
            r"map\x1b[31mred\xff\x9b.so"
        );
        // Printable text is untouched, whatever its script.
        for plain in ["gunicorn: worker", "ünïcødé → ≈ ± Û", r"C:\x1b"] {
            assert!(matches!(inert(plain), Cow::Borrowed(_)), "{plain}");
            assert_eq!(inert_bytes(plain.as_bytes()), plain);
        }
    }

    #[test]
    fn the_terminal_gets_colour_and_nothing_else() {
        let line = "leakwatch: \x1b[1;31mLEAK\x1b[0m in \x1b]0;pwn\x07\x1b[2J\n";
        assert_eq!(
            inert_terminal(line),
            "leakwatch: \x1b[1;31mLEAK\x1b[0m in \\x1b]0;pwn\\x07\\x1b[2J\n"
        );
        assert_eq!(inert_terminal("a\x1b["), r"a\x1b[");
        assert_eq!(inert_terminal("plain\n"), "plain\n");
    }

    #[test]
    fn escaping_twice_changes_nothing() {
        let once = inert_bytes(b"\x1b[2J\x9b\xc2\x9b\x00\\");
        assert_eq!(inert(&once), once);
        assert!(!once.chars().any(is_control), "{once}");
    }
}
