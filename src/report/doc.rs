//! The document model report.md and report.html share: the content is built
//! once as blocks (headings, paragraphs, lists, tables, code, charts) and each
//! format renders the blocks, escaping every cell and text as it needs.

/// Text within a paragraph or list item.
#[derive(Debug, Clone, PartialEq)]
pub enum Inline {
    Text(String),
    /// Verbatim text: a command line.
    Code(String),
    Strong(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// Level 1–3.
    Heading(u8, String),
    Para(Vec<Inline>),
    List(Vec<Vec<Inline>>),
    Table(Table),
    /// Preformatted text (the terminal summary in a CI step summary).
    Code(String),
    /// A chart written as `<stem>.svg` and `<stem>.png`.
    Chart {
        stem: String,
        caption: String,
    },
}

/// A table of plain text cells; each format escapes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<const N: usize>(headers: [&str; N], rows: Vec<Vec<String>>) -> Table {
        Table {
            headers: headers.map(String::from).to_vec(),
            rows,
        }
    }

    /// Whether every non-empty cell of column `i` is a number (`+4.00 MiB/run`, `12`, `3.1%`),
    /// so the column is right-aligned.
    pub fn numeric_column(&self, i: usize) -> bool {
        let cells: Vec<&str> = self
            .rows
            .iter()
            .filter_map(|r| r.get(i).map(|c| c.trim()))
            .filter(|c| !c.is_empty() && *c != "–")
            .collect();
        !cells.is_empty()
            && cells.iter().all(|c| {
                let c = c.trim_start_matches(['+', '-']);
                c.starts_with(|ch: char| ch.is_ascii_digit())
            })
    }
}

pub fn text(s: impl Into<String>) -> Inline {
    Inline::Text(s.into())
}

pub fn strong(s: impl Into<String>) -> Inline {
    Inline::Strong(s.into())
}

pub fn para(parts: Vec<Inline>) -> Block {
    Block::Para(parts)
}

pub fn heading(level: u8, s: impl Into<String>) -> Block {
    Block::Heading(level, s.into())
}
