//! What an installed rtlab gives a shell and man: completion scripts and manual pages.

mod common;

use common::*;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// `cargo install` below links target/<profile>/rtlab again, which the other tests here run:
/// they take turns.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn stdout_of(args: &[&str]) -> String {
    let out = rtlab().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "rtlab {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completion_scripts_are_valid_shell_and_know_the_commands() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    // The five the help names, each checked by its own shell where that shell is here.
    for (shell, check) in [
        ("bash", "bash"),
        ("zsh", "zsh"),
        ("fish", "fish"),
        ("elvish", "elvish"),
        ("powershell", "pwsh"),
    ] {
        let script = stdout_of(&["completions", shell]);
        for word in ["wakeup", "survey", "watch", "fail-above"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
        let path = dir.path().join(format!("rtlab.{shell}"));
        std::fs::write(&path, &script).unwrap();
        // Each shell's own syntax check, where that shell is installed (bash always is).
        let syntax_only = if check == "pwsh" { "-NoProfile" } else { "-n" };
        match Command::new(check).arg(syntax_only).arg(&path).output() {
            Ok(o) => assert!(
                o.status.success(),
                "{check} -n: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(_) if shell != "bash" => skip(
                "completions",
                &format!("no {check} to check the {shell} script"),
            ),
            Err(e) => panic!("bash: {e}"),
        }
    }
    assert_bad_input(&["completions", "tcsh"], &["tcsh"]);
    let help = stdout_of(&["completions", "--help"]);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(help.contains(shell), "the help names {shell}: {help}");
    }
}

/// Renders a troff page with man(1), as a user's `man -l` would.
fn rendered(page: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("page.1");
    std::fs::write(&path, page).unwrap();
    let out = Command::new("man")
        .arg("-l")
        .arg(&path)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "man -l: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn man_pages_render_for_rtlab_and_each_command() {
    let _turn = one_at_a_time();
    let top = stdout_of(&["man"]);
    assert!(
        top.contains(".TH rtlab 1"),
        "{}",
        &top[..top.len().min(300)]
    );
    let wakeup = stdout_of(&["man", "wakeup"]);
    assert!(wakeup.contains(".TH rtlab-wakeup 1"));
    let net_run = stdout_of(&["man", "net", "run"]);
    assert!(net_run.contains(".TH rtlab-net-run 1"));
    match rendered(&wakeup) {
        Some(text) => {
            for word in [
                "rtlab-wakeup",
                "--duration",
                "--interval",
                "EXAMPLES",
                "EXIT STATUS",
            ] {
                assert!(text.contains(word), "rendered page lacks {word}:\n{text}");
            }
            // Examples as written, one per line, not reflowed into a paragraph.
            assert!(
                text.lines().any(|l| {
                    l.trim()
                    == "rtlab wakeup --threads 4 --policy other        unpinned SCHED_OTHER threads"
                }),
                "{text}"
            );
            let top = rendered(&top).unwrap();
            assert!(top.contains("rtlab-survey(1)"), "{top}");
        }
        None => skip(
            "man pages",
            "no man(1) to render them (apt-get install man-db)",
        ),
    }
    assert_bad_input(&["man", "nosuch"], &["'nosuch'", "wakeup"]);
}

#[test]
fn every_page_has_exit_status_and_examples_sections_and_none_named_extra() {
    let _turn = one_at_a_time();
    // Regression: clap_mangen put each command's long help, examples and exit status
    // included, under a section named EXTRA, and filled the examples into one paragraph.
    let top = stdout_of(&["--help"]);
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 15, "{commands:?}");
    let mut pages = vec![vec![]];
    pages.extend(commands.iter().map(|c| vec![*c]));
    pages.push(vec!["net", "run"]);
    for page in pages {
        let mut args = vec!["man"];
        args.extend(&page);
        let text = stdout_of(&args);
        assert!(text.contains(".SH \"EXIT STATUS\""), "{page:?}");
        assert!(!text.contains(".SH EXTRA"), "{page:?}");
        assert!(text.contains(".SH EXAMPLES"), "{page:?}");
    }
}

/// The README's install line, into a temporary root, reusing this build's target directory
/// (so only the binary is linked again): a binary without line tables that runs.
#[test]
fn cargo_install_gives_a_small_binary_that_runs() {
    let _turn = one_at_a_time();
    let Some(cargo) = std::env::var_os("CARGO") else {
        skip("cargo install", "not run by cargo ($CARGO unset)");
        return;
    };
    // target/<profile>/deps/<this test> -> target
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().to_path_buf();
    let root = tempfile::tempdir().unwrap();
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(cargo)
        .args(["install", "--locked", "--offline", "--quiet", "--path"])
        .arg(crate_dir)
        .arg("--root")
        .arg(root.path())
        .arg("--target-dir")
        .arg(&target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = root.path().join("bin/rtlab");
    let size = std::fs::metadata(&bin).unwrap().len();
    // 22 MB with line tables (18 MB of them); the release profile ships none.
    assert!(size < 12_000_000, "installed rtlab is {size} bytes");
    let version = Command::new(&bin).arg("--version").output().unwrap();
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("rtlab {}", env!("CARGO_PKG_VERSION"))
    );
}
