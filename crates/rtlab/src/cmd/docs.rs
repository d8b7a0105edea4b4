//! `rtlab completions` and `rtlab man`: the command line's own description, for shells and man.

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::{BadInput, Status};
use clap::CommandFactory;
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
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .title(title)
        .render(&mut page)?;
    print(&page)
}
