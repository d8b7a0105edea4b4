//! What a user of the installed binary reads: every help text, every manual page and check's
//! output speak of what was measured and where, never of the project's own bookkeeping
//! (seed documents by number, issue numbers, paths in the repository) nor of commands of
//! another system (Solaris's psrset).

mod common;

use common::*;

/// `rtlab ARGS`'s stdout, required to succeed.
fn stdout_of(args: &[&str]) -> String {
    let out = rtlab().args(args).output().unwrap();
    assert!(out.status.success(), "rtlab {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The names under a help text's `Commands:` heading (`help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|name| name != "help")
        .collect()
}

/// Every command path: [], [wakeup], [net], [net, run], ...
fn command_paths() -> Vec<Vec<String>> {
    let mut paths = vec![vec![]];
    let mut i = 0;
    while i < paths.len() {
        let path: Vec<String> = paths[i].clone();
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        for sub in subcommands(&stdout_of(&args)) {
            let mut next = path.clone();
            next.push(sub);
            paths.push(next);
        }
        i += 1;
    }
    paths
}

/// A seed document or an issue by number ("Seed 000", "seeds 001/002", "issue 8"), in a
/// lower-cased line.
fn names_by_number(lower: &str) -> bool {
    ["seed ", "seeds ", "issue "].iter().any(|word| {
        lower
            .match_indices(word)
            .any(|(at, _)| lower[at + word.len()..].starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// The lines that give a private reference away: a seed or issue number, a path in the
/// repository, a Solaris command.
fn private_references(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| {
            let lower = line.to_lowercase();
            names_by_number(&lower)
                || ["bench/", "psrset", "crates/"]
                    .iter()
                    .any(|w| lower.contains(w))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn no_help_page_nor_check_output_names_a_private_reference() {
    let paths = command_paths();
    assert!(
        paths.len() > 20 && paths.iter().any(|p| p == &["net", "run"]),
        "{paths:?}"
    );
    let mut offenders = Vec::new();
    let mut look = |what: String, text: String| {
        for line in private_references(&text) {
            offenders.push(format!("{what}: {line}"));
        }
    };
    for path in &paths {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        let name = format!("rtlab {}", args.join(" "));
        args.push("--help");
        look(format!("{name} --help"), stdout_of(&args));
        args.pop();
        args.insert(0, "man");
        look(format!("rtlab man {}", path.join(" ")), stdout_of(&args));
    }
    look("rtlab load --help".into(), stdout_of(&["load", "--help"]));
    look("rtlab check".into(), stdout_of(&["check"]));
    look(
        "rtlab check --json".into(),
        stdout_of(&["check", "--json", "-"]),
    );
    look("rtlab tune".into(), stdout_of(&["tune"]));
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

#[test]
fn the_reference_detector_catches_what_it_must() {
    for bad in [
        "mmap  Seed 000: does ...",
        "(seed 001 moved them away: psrset -f)",
        "seeds 001/002: periodic",
        "bench/net-stack.sh on a veth",
        "see issue 22's low list",
        "crates/rtlab-sync",
    ] {
        assert_eq!(private_references(bad).len(), 1, "{bad}");
    }
    for good in [
        "a 2008 study of real-time Java on Linux measured 1 s",
        "--profile seed-poc",
        "an issue with 2 CPUs",
    ] {
        assert!(private_references(good).is_empty(), "{good}");
    }
}

/// A path into the source (a crate's directory, a source or test file) in a lower-cased
/// line; the one command that installs the binary from its crate is not one.
fn names_the_source(lower: &str) -> bool {
    let line = lower
        .replace("--path crates/rtlab ", "")
        .replace("--path crates/rtlab`", "");
    ["crates/", "src/", "tests/", ".rs`", ".rs)", ".rs "]
        .iter()
        .any(|w| line.contains(w))
}

#[test]
fn the_readme_names_studies_not_seed_or_issue_numbers_nor_source_files() {
    // The README lives in the repository, so it may point at what a user runs or reads there
    // (bench/, examples/, deploy/, include/); seed documents by number, issue numbers,
    // Solaris commands and files of the source mean nothing to a reader (the source's map is
    // the developers' document).
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let offenders: Vec<&str> = readme
        .lines()
        .filter(|line| {
            let lower = line.to_lowercase();
            names_by_number(&lower) || lower.contains("psrset") || names_the_source(&lower)
        })
        .collect();
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
    for bad in [
        "(crates/rtlab-ipc/src/ring/wake_model.rs says how",
        "`crates/rtlab-sync` is usable",
        "builds `tests/c/abi_test.c` with",
    ] {
        assert!(names_the_source(&bad.to_lowercase()), "{bad}");
    }
    assert!(!names_the_source(
        "cargo install --locked --path crates/rtlab          # rtlab"
    ));
}

/// `tools/test` (the README's test command) run with `cargo` standing for a stub that logs
/// `skipped` lines as the tests do and exits with `status`: its stdout and its exit status.
fn test_command_with(skipped: &[&str], status: i32) -> (String, Option<i32>) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let logged: String = skipped
        .iter()
        .map(|l| format!("echo '{l}' >> \"$RTLAB_SKIPPED_LOG\"\n"))
        .collect();
    let cargo = dir.path().join("cargo");
    std::fs::write(&cargo, format!("#!/bin/sh\n{logged}exit {status}\n")).unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(root.join("tools/test"))
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", dir.path().join("target"))
        .output()
        .unwrap();
    (String::from_utf8(out.stdout).unwrap(), out.status.code())
}

#[test]
fn the_test_command_ends_with_every_skipped_test_and_why_and_keeps_cargos_status() {
    // The same test logged twice (a retry) is listed once; the list is on stdout, last.
    let (out, status) = test_command_with(
        &[
            "watch: a_jvm_test: no JDK 21+",
            "fleet: the_deb_builds: needs dpkg-deb (apt-get install dpkg-dev)",
            "watch: a_jvm_test: no JDK 21+",
        ],
        0,
    );
    assert_eq!(status, Some(0), "{out}");
    assert!(
        out.ends_with(
            "skipped: 2 tests passed without running what they test here:\n  \
             fleet: the_deb_builds: needs dpkg-deb (apt-get install dpkg-dev)\n  \
             watch: a_jvm_test: no JDK 21+\n"
        ),
        "{out}"
    );
    let (out, status) = test_command_with(&[], 101);
    assert_eq!(status, Some(101), "a failing run stays failed: {out}");
    assert!(
        out.ends_with("skipped: none (every test ran what it tests)\n"),
        "{out}"
    );
}
