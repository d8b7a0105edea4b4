//! No decision in the workspace's code is made on an error's or a detail's text: errors are
//! typed (matched by variant), sources and kinds are enums. This test reads the non-test Rust
//! code of every crate and fails on the shapes such a decision takes:
//!
//! - a rendered value tested for text: `x.to_string().contains(..)` (or `starts_with`,
//!   `ends_with`, `==`, `!=`);
//! - a binding named as an error or a message tested for text: `e.contains(..)`,
//!   `why.starts_with(..)`, `err == ".."` (names: [`ERROR_NAMES`]);
//! - a field naming where something came from or what it is, compared to a string literal:
//!   `findings.backend != "bpf"`, `c.kind == ".."` (fields: [`KIND_FIELDS`]).
//!
//! Parsing stays free: a line of /proc or a command-line value held in a local of another
//! name (`line.starts_with("flags")`, `kind == "cgroup2"`, `key.starts_with("net.")`) is none
//! of these. Test code (`tests/`, `tests.rs`, `#[cfg(test)] mod`) may check messages.

use std::path::{Path, PathBuf};

/// Bindings that hold an error or a message.
const ERROR_NAMES: &[&str] = &[
    "e", "err", "error", "why", "msg", "message", "reason", "detail", "details", "stderr",
];

/// Fields that say where something came from or what it is: enums, not text.
const KIND_FIELDS: &[&str] = &["backend", "source", "kind", "status", "reason", "cause"];

const TEXT_TESTS: &[&str] = &[".contains(", ".starts_with(", ".ends_with("];

#[test]
fn no_decision_is_made_on_an_errors_or_a_details_text() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    assert!(files.len() > 50, "the workspace's sources: {}", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, what) in text_decisions(&text) {
            found.push(format!(
                "{}:{line}: {what}",
                file.strip_prefix(&root).unwrap_or(file).display()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "decisions made on an error's or a detail's text (match a variant instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_finds_the_shapes_and_leaves_parsing_alone() {
    for bad in [
        "if e.to_string().contains(\"no such process\") {}",
        "match x { Err(IpcError::Corrupt(why)) if why.contains(\"magic\") => {} }",
        "if findings.backend != \"bpf\" {}",
        "let b = explainer.backend() == \"bpf\";",
        "if err\n    .to_string()\n    .starts_with(\"PI lock waits\") {}",
        "if e.starts_with(\"cannot connect\") {}",
        "let x = msg == \"done\";",
    ] {
        assert_eq!(text_decisions(bad).len(), 1, "{bad}");
    }
    for good in [
        "(kind == \"cgroup2\").then(|| 1)",
        ".filter(|l| l.starts_with(\"flags\"))",
        "let valid = key.starts_with(\"net.\") && !key.contains(\"..\");",
        "// if e.to_string().contains(\"x\") in a comment",
        "let s = \"e.contains(\";",
        "assert_eq!(x, 1);\n#[cfg(test)]\nmod tests {\n    fn t() { assert!(e.to_string().contains(\"x\")); }\n}\n",
        "if c.kind == CauseKind::Throttling {}",
    ] {
        assert!(text_decisions(good).is_empty(), "{good}");
    }
}

/// Every `.rs` file under `dir` but test files and build output.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" && name != "target" && name != "benches" {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.starts_with("tests_") {
            out.push(path);
        }
    }
}

/// (line, the expression) of each decision on text in `source`.
fn text_decisions(source: &str) -> Vec<(usize, String)> {
    let code = code_only(source);
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut report = |at: usize, what: &str| {
        let line = code[..at].matches('\n').count() + 1;
        found.push((line, what.split_whitespace().collect::<Vec<_>>().join(" ")));
    };
    for test in TEXT_TESTS {
        for (at, _) in code.match_indices(test) {
            let receiver = receiver_before(&code, at);
            if is_rendered(&receiver) || ERROR_NAMES.contains(&receiver.as_str()) {
                report(at, &format!("{receiver}{test}"));
            }
        }
    }
    for op in ["==", "!="] {
        for (at, _) in code.match_indices(op) {
            // Not `<=`, `>=`, `===` or a `!==`.
            if at > 0 && matches!(bytes[at - 1], b'<' | b'>' | b'=' | b'!') {
                continue;
            }
            let left = receiver_before(&code, code[..at].trim_end().len());
            let left = left.as_str();
            let right = code[at + 2..].trim_start();
            let literal_right = right.starts_with('"') || right.starts_with("Some(\"");
            let literal_left = code[..at].trim_end().ends_with('"');
            let decided = is_rendered(left)
                || ERROR_NAMES.contains(&left)
                || is_kind_field(left)
                || (literal_left && is_kind_field(receiver_after(right)));
            if decided && (literal_right || literal_left || is_rendered(left)) {
                report(at, &format!("{left} {op} {}", first_token(right)));
            }
        }
    }
    found
}

/// `x.to_string()`, `x.to_string().as_str()`: a value turned into its text.
fn is_rendered(expr: &str) -> bool {
    let expr = expr.trim_end_matches(".as_str()");
    expr.ends_with("to_string()") || expr.ends_with(".message()")
}

/// `a.backend`, `a.kind()`: a field (or getter) that should be an enum.
fn is_kind_field(expr: &str) -> bool {
    let expr = expr.trim_end_matches("()");
    match expr.rsplit_once('.') {
        Some((_, field)) => KIND_FIELDS.contains(&field),
        None => false,
    }
}

/// The expression (a path, calls included) that ends just before `at`, whitespace between
/// its parts dropped.
fn receiver_before(code: &str, at: usize) -> String {
    let bytes = code.as_bytes();
    let mut start = at;
    let mut depth = 0i32;
    while start > 0 {
        match bytes[start - 1] {
            b')' | b']' => depth += 1,
            b'(' | b'[' if depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            b'.' | b'_' | b':' => {}
            c if c.is_ascii_alphanumeric() => {}
            c if c.is_ascii_whitespace() => {
                // Whitespace inside a chain (`err\n    .to_string()`), not before it.
                let before = code[..start - 1].trim_end();
                let after = code[start..=at.min(code.len() - 1)].trim_start();
                if !(after.starts_with('.') || before.ends_with('.')) {
                    break;
                }
            }
            _ => break,
        }
        start -= 1;
    }
    code[start..at].split_whitespace().collect()
}

/// The path at the start of `text` (`findings.backend` of `findings.backend {`).
fn receiver_after(text: &str) -> &str {
    let end = text
        .find(|c: char| {
            !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '(' || c == ')')
        })
        .unwrap_or(text.len());
    &text[..end]
}

fn first_token(text: &str) -> &str {
    text.split([' ', '\n', '{', ')', ';', ','])
        .next()
        .unwrap_or("")
}

/// `source` with comments, string contents and `#[cfg(test)]` modules blanked (newlines
/// kept, so line numbers hold). String literals keep their quotes: `== "bpf"` still shows a
/// literal.
fn code_only(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
            }
            '"' => {
                out.push('"');
                let mut escaped = false;
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if !escaped && c == '"' {
                        break;
                    }
                    escaped = !escaped && c == '\\';
                }
                out.push('"');
            }
            // A char literal ('"', '\'') would open a string above; lifetimes ('a) pass.
            '\'' => {
                out.push('\'');
                let rest: String = chars.clone().take(4).collect();
                let len = if rest.starts_with('\\') {
                    rest.find('\'').map(|i| i + 1)
                } else if rest.chars().nth(1) == Some('\'') {
                    Some(2)
                } else {
                    None
                };
                if let Some(len) = len {
                    for _ in 0..len {
                        chars.next();
                    }
                    out.push('\'');
                }
            }
            c => out.push(c),
        }
    }
    blank_test_modules(&out)
}

/// `#[cfg(test)] mod NAME { ... }` blanked, brace-matched (newlines kept).
fn blank_test_modules(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(i) = out[from..].find("#[cfg(test)]") {
        let at = from + i;
        let rest = &out[at + "#[cfg(test)]".len()..];
        let is_mod = rest.trim_start().starts_with("mod ")
            || rest.trim_start().starts_with("pub mod ")
            || rest.trim_start().starts_with("pub(crate) mod ");
        let open = rest.find('{');
        let semicolon = rest.find(';');
        match (is_mod, open) {
            (true, Some(open)) if semicolon.is_none_or(|s| s > open) => {
                let body = at + "#[cfg(test)]".len() + open;
                let mut depth = 0;
                let mut end = out.len();
                for (j, c) in out[body..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = body + j + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let blank: String = out[at..end]
                    .chars()
                    .map(|c| if c == '\n' { '\n' } else { ' ' })
                    .collect();
                out.replace_range(at..end, &blank);
                from = at + blank.len();
            }
            _ => from = at + 1,
        }
    }
    out
}
