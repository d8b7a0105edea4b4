//! `rtlab tune`: the plan, `--apply` (saving every prior value first) and `--revert`.

use crate::cli::TuneArgs;
use crate::{BadInput, Status};
use rtlab_lab::tune::{self, Change, Plan, TuneConfig};
use rtlab_report::table::Table;

fn changes_table(changes: &[Change], outcome: impl Fn(&Change) -> String) -> String {
    let mut t = Table::new(&["fix", "file", "was", "now", "result"]).left_aligned();
    for c in changes {
        t.row(vec![
            c.id().to_string(),
            c.path.display().to_string(),
            c.before.clone(),
            c.after.clone(),
            outcome(c),
        ]);
    }
    t.render()
}

/// The plan's notes on fixes whose check is not ok, then the fixes it leaves undone.
fn printed(plan: &Plan, checks: &[rtlab_lab::check::Check], cfg: &TuneConfig) -> String {
    let mut out = String::new();
    let ok = |id: &str| {
        checks
            .iter()
            .any(|c| c.id == id && c.status == rtlab_lab::check::Status::Ok)
    };
    let mut rest: Vec<(String, String)> = plan
        .printed
        .iter()
        .filter(|(id, _)| !ok(id))
        .cloned()
        .collect();
    rest.extend(tune::not_applied(checks, plan, cfg));
    // In the checks' order, each fix's note before its own advice.
    rest.sort_by_key(|(id, _)| checks.iter().position(|c| c.id == id));
    if !rest.is_empty() {
        out.push_str("\nnot applied (do these yourself):\n");
        // Each fix named once, its note and its advice under it.
        let mut last: Option<String> = None;
        for (id, fix) in rest {
            match last.as_deref() == Some(id.as_str()) {
                true => out.push_str(&format!("  {:width$}  {fix}\n", "", width = id.len())),
                false => out.push_str(&format!("  {id}: {fix}\n")),
            }
            last = Some(id);
        }
    }
    out
}

/// What to tune: the real-time CPUs (`--cpus`, else the one check suggests),
/// `--only`'s fixes and `--pid`'s process.
fn config(args: &TuneArgs) -> TuneConfig {
    TuneConfig {
        rt_cpus: match &args.cpus {
            Some(list) => list.as_slice().to_vec(),
            None => vec![rtlab_sys::affinity::suggested_rt_cpu()],
        },
        only: (!args.only.is_empty()).then(|| args.only.clone()),
        slack_pid: args.pid,
    }
}

fn need_root(what: &str) -> Result<(), BadInput> {
    if rtlab_sys::process::effective_uid() != 0 {
        return Err(BadInput(format!(
            "rtlab tune {what} needs root: it writes /proc, /sys and debugfs (nothing was changed)"
        )));
    }
    Ok(())
}

pub fn run(args: TuneArgs) -> anyhow::Result<Status> {
    if let [file, rest @ ..] = args.guard.as_slice() {
        return super::tune_verify::guard(file, rest.first());
    }
    super::tune_verify::validate(&args)?;
    if let Some(file) = &args.revert {
        return revert(file);
    }
    if !args.export.is_empty() {
        return export(&args);
    }
    if args.state.is_some() && !args.apply {
        return Err(
            BadInput("--state FILE goes with --apply (or use --revert FILE)".into()).into(),
        );
    }
    if let Some(pid) = args.pid {
        if !std::path::Path::new(&format!("/proc/{pid}/task")).is_dir() {
            return Err(BadInput(format!("--pid {pid}: no such process")).into());
        }
        if rtlab_sys::procfs::is_kernel_thread(pid) {
            return Err(BadInput(format!(
                "--pid {pid} is a kernel thread: its timer slack is the kernel's to set"
            ))
            .into());
        }
    }
    let cfg = config(&args);
    let rt_cpus = cfg.rt_cpus.clone();
    let checks = rtlab_lab::check::run_checks();
    let plan = tune::plan(&cfg);
    let cpus = rtlab_sys::affinity::CpuList::from(rt_cpus.clone());
    if !args.apply {
        let mut out = format!(
            "rtlab tune: the plan for real-time CPUs {cpus} (nothing changed; --apply --state FILE applies it)\n"
        );
        if plan.changes.is_empty() {
            out.push_str("nothing to change at run time\n");
        } else {
            out.push_str(&changes_table(&plan.changes, |_| "planned".into()));
        }
        out.push_str(&printed(&plan, &checks, &cfg));
        print!("{out}");
        return Ok(Status::Ok);
    }
    need_root("--apply")?;
    let file = args
        .state
        .as_ref()
        .expect("clap requires --state with --apply");
    if file.exists() {
        return Err(BadInput(format!(
            "--state {}: exists (it may hold an earlier --apply's prior values: revert it with \
             rtlab tune --revert {0}, or choose another file)",
            file.display()
        ))
        .into());
    }
    rtlab_report::check_writable_file(file).map_err(|e| BadInput(format!("--state {e}")))?;
    let tail = printed(&plan, &checks, &cfg);
    if args.verify {
        if plan.changes.is_empty() {
            println!("rtlab tune --verify: nothing to change at run time, so nothing to measure");
            print!("{tail}");
            return Ok(Status::Ok);
        }
        let status = super::tune_verify::run(&args, plan.changes, &rt_cpus, file)?;
        // With the document on stdout, everything else goes to stderr.
        match args.json.as_deref() == Some(std::path::Path::new("-")) {
            true => eprint!("{tail}"),
            false => print!("{tail}"),
        }
        return Ok(status);
    }
    let count = plan.changes.len();
    let state = tune::apply(plan, &rt_cpus, file).map_err(anyhow::Error::msg)?;
    let applied = state.changes.iter().filter(|c| c.applied).count();
    println!(
        "rtlab tune: applied {applied} of {count} changes for real-time CPUs {cpus}; prior values in {} (rtlab tune --revert {0} restores them)",
        file.display()
    );
    if count > 0 {
        print!(
            "{}",
            changes_table(&state.changes, |c| match c.applied {
                true => "changed".into(),
                false => "NOT changed (why: below)".into(),
            })
        );
    }
    print!("{tail}");
    for line in refusals(&state.changes) {
        eprintln!("{line}");
    }
    Ok(Status::Ok)
}

/// One warning per fix and reason for the changes not made (the files in the order tried):
/// a machine with many interrupts the kernel manages has one reason for all of them.
fn refusals(changes: &[Change]) -> Vec<String> {
    let mut by_why: Vec<((&str, &str), Vec<String>)> = Vec::new();
    for c in changes.iter().filter(|c| !c.applied) {
        let key = (c.id(), c.error.as_deref().unwrap_or("no reason recorded"));
        let file = c.path.display().to_string();
        match by_why.iter_mut().find(|(k, _)| *k == key) {
            Some((_, files)) => files.push(file),
            None => by_why.push((key, vec![file])),
        }
    }
    (by_why.into_iter())
        .map(|((id, why), files)| {
            format!("warning: {id}: not changed: {}: {why}", files.join(", "))
        })
        .collect()
}

/// The directory `--export NAME DIR` writes to, made where it does not exist yet (as `mkdir`
/// makes it: its parent must exist).
fn export_dir(name: &str, d: &str) -> Result<std::path::PathBuf, BadInput> {
    let path = std::path::Path::new(d);
    if !path.exists() {
        std::fs::create_dir(path)
            .map_err(|e| BadInput(format!("--export {name} {d}: cannot make it: {e}")))?;
    } else if !path.is_dir() {
        return Err(BadInput(format!("--export {name} {d}: not a directory")));
    }
    Ok(path.to_path_buf())
}

/// `--export FORMAT [DIR]`: the fixes of `--state FILE` (or the plan) as a tuned profile, a
/// systemd unit or a kernel command line.
fn export(args: &TuneArgs) -> anyhow::Result<Status> {
    use tune::export::{Format, Source};
    let (name, dir) = (args.export[0].as_str(), args.export.get(1));
    let format = Format::parse(name).ok_or_else(|| {
        BadInput(format!(
            "--export {name}: not a format (tuned DIR, systemd DIR or cmdline)"
        ))
    })?;
    let dir = match (format.writes_files(), dir) {
        (true, Some(d)) => Some(export_dir(name, d)?),
        (true, None) => {
            return Err(BadInput(format!(
                "--export {name} needs a directory: --export {name} DIR"
            ))
            .into())
        }
        (false, Some(d)) => {
            return Err(BadInput(format!("--export cmdline prints; no directory ({d})")).into())
        }
        (false, None) => None,
    };
    let online = rtlab_sys::affinity::online_cpus().as_slice().to_vec();
    let (changes, rt_cpus, what) = match &args.state {
        Some(file) => {
            let state = tune::load(file).map_err(|e| BadInput(e.to_string()))?;
            let kept: Vec<Change> = state.changes.into_iter().filter(|c| c.applied).collect();
            (kept, state.rt_cpus, format!("kept in {}", file.display()))
        }
        None => {
            let cfg = config(args);
            let rt_cpus = cfg.rt_cpus.clone();
            (
                tune::plan(&cfg).changes,
                rt_cpus,
                "planned for this machine".to_string(),
            )
        }
    };
    let rtlab = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "rtlab".into());
    let src = Source {
        what: &what,
        rt_cpus: &rt_cpus,
        online: &online,
        rtlab: &rtlab,
    };
    let out = tune::export::export(format, &changes, &src);
    if let Some(dir) = &dir {
        for (file, text) in &out.files {
            let path = dir.join(file);
            rtlab_sys::fs::write_atomically(&path, text.as_bytes())
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            eprintln!("rtlab tune: wrote {} (the fixes {what})", path.display());
        }
    } else {
        println!("{}", out.printed);
        eprintln!(
            "rtlab tune: the kernel parameters of the fixes only a boot makes, for real-time \
             CPUs {} (add them to GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and \
             reboot)",
            rtlab_sys::affinity::CpuList::from(rt_cpus.clone())
        );
    }
    for (id, why) in &out.cannot {
        eprintln!("rtlab tune: not carried: {id}: {why}");
    }
    Ok(Status::Ok)
}

fn revert(file: &std::path::Path) -> anyhow::Result<Status> {
    need_root("--revert")?;
    let state = tune::load(file).map_err(|e| BadInput(e.to_string()))?;
    let back = tune::revert(&state);
    let mut t = Table::new(&["fix", "file", "restored to", "result"]).left_aligned();
    let mut failed = 0;
    for r in &back {
        let result = match (&r.now, r.restored()) {
            (None, _) => "gone (with what it belonged to)".to_string(),
            (Some(_), true) => "restored".to_string(),
            (Some(now), false) => {
                failed += 1;
                format!(
                    "NOT restored: reads {now}{}",
                    r.error
                        .as_ref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                )
            }
        };
        t.row(vec![
            r.change.id().to_string(),
            r.change.path.display().to_string(),
            r.change.before.clone(),
            result,
        ]);
    }
    println!(
        "rtlab tune: reverted {} of {} changes from {}",
        back.len() - failed,
        back.len(),
        file.display()
    );
    if !back.is_empty() {
        print!("{}", t.render());
    }
    if failed > 0 {
        anyhow::bail!(
            "{failed} value(s) not restored; {} kept (run rtlab tune --revert {0} again once fixed)",
            file.display()
        );
    }
    std::fs::remove_file(file)
        .map_err(|e| anyhow::anyhow!("restored, but cannot remove {}: {e}", file.display()))?;
    Ok(Status::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_lab::tune::Knob;

    #[test]
    fn changes_refused_for_one_reason_are_one_warning() {
        let change = |irq: u32, error: Option<&str>| Change {
            knob: Knob::IrqAffinity { irq },
            path: format!("/proc/irq/{irq}/smp_affinity_list").into(),
            before: "0-1".into(),
            after: "0".into(),
            applied: error.is_none(),
            error: error.map(String::from),
        };
        let managed = &format!("Operation not permitted (os error 1): {}", tune::IRQ_KEPT);
        let changes = [
            change(24, None),
            change(36, Some(managed)),
            change(37, Some("No such file or directory (os error 2)")),
            change(38, Some(managed)),
        ];
        let lines = refusals(&changes);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with(
            "warning: irq_affinity: not changed: /proc/irq/36/smp_affinity_list, \
             /proc/irq/38/smp_affinity_list: Operation not permitted"
        ));
        assert!(lines[1].contains("/proc/irq/37/smp_affinity_list: No such file"));
    }
}
