//! `rtlab completions` and `rtlab man`: the command line's own description, for shells and man.

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::{BadInput, Status};
use clap::CommandFactory;
use clap_mangen::roff::{roman, Roff};
use std::io::Write;

/// Writes `bytes` to stdout; a reader that went away (`| head`) is not an error.
fn print(bytes: &[u8]) -> anyhow::Result<Status> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(Status::Ok),
    }
}

pub fn completions(args: CompletionsArgs) -> anyhow::Result<Status> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "rtlab", &mut script);
    print(&script)
}

pub fn man(args: ManArgs) -> anyhow::Result<Status> {
    let mut command = Cli::command();
    command.build();
    if let Some(dir) = &args.out_dir {
        if !dir.is_dir() {
            let what = match dir.exists() {
                true => "not a directory",
                false => "no such directory",
            };
            return Err(BadInput(format!("--out-dir {}: {what}", dir.display())).into());
        }
        let written = write_pages(dir, command, "rtlab".into())?;
        eprintln!("rtlab man: {written} pages in {}", dir.display());
        return Ok(Status::Ok);
    }
    let mut title = "rtlab".to_string();
    for part in &args.command {
        let names: Vec<String> = command
            .get_subcommands()
            .filter(|c| !c.is_hide_set() && c.get_name() != "help")
            .map(|c| c.get_name().to_string())
            .collect();
        let Some(sub) = command.find_subcommand(part).cloned() else {
            let known = if names.is_empty() {
                format!("'{title}' has no commands")
            } else {
                format!("expected one of {}", names.join(", "))
            };
            return Err(BadInput(format!("man: unknown command '{part}' ({known})")).into());
        };
        title = format!("{title}-{part}");
        command = sub;
    }
    print(&page(command, title)?)
}

/// Writes the page of `command` and of every command below it into `dir` as `<title>.1`;
/// returns how many.
fn write_pages(
    dir: &std::path::Path,
    command: clap::Command,
    title: String,
) -> anyhow::Result<usize> {
    let subcommands: Vec<clap::Command> = command
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .cloned()
        .collect();
    let path = dir.join(format!("{title}.1"));
    std::fs::write(&path, page(command, title.clone())?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut written = 1;
    for sub in subcommands {
        let sub_title = format!("{title}-{}", sub.get_name());
        written += write_pages(dir, sub, sub_title)?;
    }
    Ok(written)
}

/// A piece of a help text: a paragraph to fill, or lines to keep as written (examples,
/// tables, lists: anything indented).
#[derive(Debug, PartialEq)]
enum Block {
    Prose(String),
    Verbatim(Vec<String>),
}

/// A command's long help (clap's after-help) cut into a manual page's sections.
#[derive(Debug, Default, PartialEq)]
struct Parts {
    description: Vec<Block>,
    examples: Vec<Block>,
}

fn blocks(lines: &[&str]) -> Vec<Block> {
    let mut out = Vec::new();
    for line in lines {
        let verbatim = line.starts_with(' ');
        match (out.last_mut(), verbatim) {
            (Some(Block::Verbatim(v)), true) => v.push(line.to_string()),
            (Some(Block::Prose(p)), false) => {
                p.push(' ');
                p.push_str(line);
            }
            (_, true) => out.push(Block::Verbatim(vec![line.to_string()])),
            (_, false) => out.push(Block::Prose(line.to_string())),
        }
    }
    out
}

/// Paragraphs headed `Examples:` go to EXAMPLES; one headed `Exit status:` is dropped (the
/// page's EXIT STATUS is made from the command's own gates); the rest is description.
fn parts(after_help: &str) -> Parts {
    let mut parts = Parts::default();
    for paragraph in after_help.split("\n\n") {
        let lines: Vec<&str> = paragraph.lines().filter(|l| !l.trim().is_empty()).collect();
        match lines.first() {
            Some(first) if first.trim_end() == "Examples:" => {
                parts.examples.extend(blocks(&lines[1..]));
            }
            Some(first) if first.starts_with("Exit status:") => {}
            Some(_) => parts.description.extend(blocks(&lines)),
            None => {}
        }
    }
    parts
}

fn write_blocks(roff: &mut Roff, blocks: &[Block]) {
    for block in blocks {
        roff.control("PP", []);
        match block {
            Block::Prose(text) => {
                roff.text([roman(text.as_str())]);
            }
            Block::Verbatim(lines) => {
                roff.control("nf", []);
                for line in lines {
                    roff.text([roman(line.as_str())]);
                }
                roff.control("fi", []);
            }
        }
    }
}

/// The EXIT STATUS entries of `command` (`title`: rtlab, rtlab-wakeup, ...): the shared
/// meanings, and 3 for the gates this command has.
fn exit_status(command: &clap::Command, title: &str) -> Vec<(&'static str, String)> {
    if title == "rtlab-exec" {
        return vec![
            (
                "CMD's",
                "rtlab exec becomes CMD: its exit status is CMD's own".into(),
            ),
            ("1", "CMD could not be started".into()),
            (
                "2",
                "bad usage or bad input (one line on stderr says which and why)".into(),
            ),
        ];
    }
    let mut failed = "the run failed".to_string();
    match title {
        "rtlab-invert" => failed.push_str(", or --check saw a high-priority thread wait over 1 s"),
        "rtlab-tune" => {
            failed.push_str(", or --revert left a value not restored (FILE is kept)");
        }
        _ => {}
    }
    let mut codes = vec![
        ("0", "success".to_string()),
        ("1", failed),
        (
            "2",
            "bad usage or bad input (one line on stderr says which argument and why)".into(),
        ),
    ];
    let gates: Vec<String> = if title == "rtlab" {
        ["--fail-above", "--fail-on", "--fail-area", "--fail-worse"]
            .map(String::from)
            .to_vec()
    } else {
        command
            .get_arguments()
            .filter(|a| a.get_id().as_str().starts_with("fail_"))
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect()
    };
    if !gates.is_empty() {
        codes.push((
            "3",
            format!(
                "a gate was hit ({}), after everything was printed and written",
                gates.join(", ")
            ),
        ));
    }
    if title == "rtlab-watch" {
        codes.push((
            "CMD's",
            "with a command after --, its exit status (128 + N if signal N killed it)".into(),
        ));
    }
    codes
}

/// The manual page of `command`: clap's NAME, SYNOPSIS, DESCRIPTION (with the long help's
/// prose), OPTIONS and subcommands, then EXIT STATUS and EXAMPLES as man-pages(7) orders them,
/// examples kept line by line as written.
fn page(command: clap::Command, title: String) -> std::io::Result<Vec<u8>> {
    let after_help = command
        .get_after_long_help()
        .or_else(|| command.get_after_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let parts = parts(&after_help);
    let codes = exit_status(&command, &title);
    let has_options = command.get_arguments().any(|a| !a.is_hide_set());
    let has_commands = command.get_subcommands().any(|c| !c.is_hide_set());
    let has_version = command.get_version().is_some();
    let with_causes = title == "rtlab-watch" || title == "rtlab-wakeup";
    let man = clap_mangen::Man::new(command).title(title);
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    let mut description = Roff::new();
    write_blocks(&mut description, &parts.description);
    description.to_writer(&mut page)?;
    if has_options {
        man.render_options_section(&mut page)?;
    }
    if has_commands {
        man.render_subcommands_section(&mut page)?;
    }
    let mut tail = Roff::new();
    tail.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in codes {
        tail.control("TP", []);
        tail.text([roman(code)]);
        tail.text([roman(meaning)]);
    }
    if with_causes {
        causes(&mut tail);
    }
    if !parts.examples.is_empty() {
        tail.control("SH", ["EXAMPLES"]);
        write_blocks(&mut tail, &parts.examples);
    }
    tail.to_writer(&mut page)?;
    if has_version {
        man.render_version_section(&mut page)?;
    }
    Ok(page)
}

/// What each cause of a late wakeup means and what usually fixes it (the README's tables).
const CAUSES: &str = include_str!("../../../../docs/causes.md");

/// The CAUSES section: each kind, then each reason code, with what usually fixes it.
fn causes(roff: &mut Roff) {
    roff.control("SH", ["CAUSES"]);
    roff.text([roman(
        "Each explained delay is split into causes; each cause has a kind and most a reason \
         code (the JSON's kind and reason; the text words the same finding).",
    )]);
    for line in CAUSES.lines() {
        let cells: Vec<String> = (line.trim().trim_matches('|').split(" | "))
            .map(|c| c.trim().replace('`', ""))
            .collect();
        if !line.starts_with("| `") {
            continue;
        }
        let (what, fix) = match cells.as_slice() {
            [_, what, fix] => (what.clone(), fix.clone()),
            [_, kinds, what, fix] => (format!("{what} (kind: {kinds})"), fix.clone()),
            _ => continue,
        };
        roff.control("TP", []);
        roff.text([clap_mangen::roff::bold(cells[0].as_str())]);
        roff.text([roman(format!("{what} Fix: {fix}"))]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_help_text_is_cut_into_description_and_examples_kept_as_written() {
        let help = "Series: a, b\ncontinued here.\n  indented   table\n\nExit status: 0 ok.\n\n\
                    Examples:\n  rtlab x --y 1      the first\n  rtlab z\nA closing note.";
        let p = parts(help);
        assert_eq!(
            p.description,
            [
                Block::Prose("Series: a, b continued here.".into()),
                Block::Verbatim(vec!["  indented   table".into()]),
            ]
        );
        assert_eq!(
            p.examples,
            [
                Block::Verbatim(vec![
                    "  rtlab x --y 1      the first".into(),
                    "  rtlab z".into()
                ]),
                Block::Prose("A closing note.".into()),
            ]
        );
    }

    #[test]
    fn exit_status_names_the_gates_each_command_has() {
        let mut cli = Cli::command();
        cli.build();
        let of = |name: &str| {
            let c = cli.find_subcommand(name).unwrap();
            exit_status(c, &format!("rtlab-{name}"))
        };
        let three = |codes: &[(&str, String)]| {
            codes
                .iter()
                .find(|(c, _)| *c == "3")
                .map(|(_, m)| m.clone())
        };
        assert!(three(&of("wakeup")).unwrap().contains("--fail-above"));
        let check = three(&of("check")).unwrap();
        assert!(check.contains("--fail-on") && !check.contains("--fail-above"));
        assert!(three(&of("diff")).unwrap().contains("--fail-worse"));
        assert_eq!(three(&of("report")), None);
        assert_eq!(of("exec")[0].0, "CMD's");
    }

    #[test]
    fn the_watch_and_wakeup_pages_explain_every_cause_kind_and_reason_code() {
        let mut cli = Cli::command();
        cli.build();
        let readme = include_str!("../../../../README.md");
        for name in ["watch", "wakeup"] {
            let c = cli.find_subcommand(name).unwrap().clone();
            let text = String::from_utf8(page(c, format!("rtlab-{name}")).unwrap()).unwrap();
            assert!(text.contains(".SH CAUSES"), "{name}");
            for kind in [
                "hypervisor_gap",
                "idle_exit",
                "preemption",
                "observer",
                "safepoint",
            ] {
                assert!(text.contains(kind), "{name}: {kind}");
            }
            for code in [
                "timer_slack",
                "non_preemptible",
                "before_first_event",
                "fair_server",
            ] {
                assert!(text.contains(code), "{name}: {code}");
            }
        }
        // Every kind and code the results can carry has its row, and the README has the same.
        let kinds = [
            "irq",
            "softirq",
            "nmi",
            "preemption",
            "blocking",
            "idle_exit",
            "migration",
            "hypervisor_gap",
            "page_fault",
            "syscall",
            "observer",
            "safepoint",
            "unexplained",
        ];
        for k in kinds {
            assert!(CAUSES.contains(&format!("| `{k}` |")), "{k}");
        }
        for line in CAUSES.lines().filter(|l| l.starts_with("| `")) {
            assert!(readme.contains(line), "the README lacks: {line}");
        }
        // Every reason code the explainer has (as its list in the result's types names them).
        let types = include_str!("../../../rtlab-stats/src/result.rs");
        let list = types.split("reason_codes! {").nth(1).unwrap();
        let list = &list[..list.find('}').unwrap()];
        let codes: Vec<&str> = (list.lines()).filter_map(|l| l.split('"').nth(1)).collect();
        assert!(codes.len() >= 38, "{codes:?}");
        for code in codes {
            assert!(
                CAUSES.contains(&format!("| `{code}` |")),
                "no row for {code}"
            );
        }
    }
}
