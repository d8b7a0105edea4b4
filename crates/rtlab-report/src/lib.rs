//! Writers of results: terminal tables, JSON and `.hgrm` files, the live status line.
//! A writer never measures; everything here turns a result document into text or files.
#![deny(unsafe_code)]

pub mod cause;
pub mod diff;
mod export;
pub mod html;
pub mod prometheus;
pub mod table;

pub use export::{
    atomic_write, check_writable_dir, check_writable_file, hgrm_file_name, Exporter, HgrmExporter,
    JsonExporter, ReportError,
};

/// `text` safe to print on a terminal: control characters other than newline and tab (an
/// escape sequence in a task name a local user chose, a series name in a result file) are
/// shown as `\u{..}` instead of being interpreted by the terminal.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn terminal_escapes_are_shown_not_obeyed() {
        // Regression (hardening #4): series and task names were printed raw.
        assert_eq!(super::printable("thread0\n"), "thread0\n");
        assert_eq!(
            super::printable("a\x1b]0;pwned\x07b"),
            "a\\u{1b}]0;pwned\\u{7}b"
        );
        assert_eq!(super::printable("\u{9b}2J"), "\\u{9b}2J");
    }
}
