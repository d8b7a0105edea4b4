//! `rtlab`: measure, explain and fix worst-case latency on stock Linux.
//!
//! The binary only parses arguments, shows progress and dispatches; the work is in the
//! libraries. Exit status: 0 success, 1 the run failed, 2 bad usage or input, 3 a
//! `--fail-above` gate was hit.
#![deny(unsafe_code)]

// What rtlab prints never panics when its terminal or pipe is gone (std's macros do, and a
// closed terminal is how a run is often ended): the line is lost, the run's results and its
// cleanup are not. These shadow std's four for the whole binary.
macro_rules! eprintln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}
macro_rules! eprint {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($t)*);
    }};
}
macro_rules! println {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
macro_rules! print {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

mod cli;
mod cmd;
mod hlog;
mod metrics;
mod output;

use std::process::ExitCode;

/// An error caused by what the user asked for: one line on stderr, exit 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// What a command asks the process to exit with when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Exit 0.
    Ok,
    /// Exit 3: a gate was hit (`--fail-above`, `--fail-on-loss`).
    GateHit,
    /// The exit status of a command rtlab ran (`rtlab watch -- CMD`).
    Exit(u8),
}

fn exit_code_for(err: &anyhow::Error) -> u8 {
    let bad_input = err.chain().any(|e| {
        e.downcast_ref::<BadInput>().is_some()
            || e.downcast_ref::<rtlab_lab::LabError>()
                .is_some_and(|l| l.is_bad_input())
            || e.downcast_ref::<rtlab_load::LoadError>()
                .is_some_and(|l| l.is_bad_input())
    });
    if bad_input {
        2
    } else {
        1
    }
}

/// An error as the command line says it: a lab configuration field as the flag that sets it.
fn said(e: &(dyn std::error::Error + 'static)) -> String {
    match e.downcast_ref::<rtlab_lab::LabError>() {
        Some(rtlab_lab::LabError::BadConfig { field, reason }) => {
            format!("{} {reason}", cli::flag_of(field))
        }
        _ => e.to_string(),
    }
}

fn main() -> ExitCode {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    rtlab_sys::signal::install_interrupt_handler();
    match cmd::run(cli) {
        Ok(Status::Ok) => ExitCode::SUCCESS,
        Ok(Status::GateHit) => ExitCode::from(3),
        Ok(Status::Exit(code)) => ExitCode::from(code),
        Err(err) => {
            // One line: the chain joined, no backtrace; a cause its error already says
            // ("path: reason", then the reason) is said once.
            let mut text = String::new();
            for part in err.chain().map(said) {
                if text.ends_with(&part) {
                    continue;
                }
                if !text.is_empty() {
                    text.push_str(": ");
                }
                text.push_str(&part);
            }
            eprintln!("error: {text}");
            ExitCode::from(exit_code_for(&err))
        }
    }
}
