//! `rtlab check`.

use crate::cli::CheckArgs;
use crate::output::{standalone_doc, Gate, Outputs};
use crate::Status;
use rtlab_lab::check::{as_series, run_checks, top_actions, Check};
use rtlab_report::table::Table;
use rtlab_stats::Nanos;

/// The audit table and the advice, as printed.
pub fn render(checks: &[Check]) -> String {
    let mut t = Table::new(&["check", "status", "found"]).left_aligned();
    for c in checks {
        t.row(vec![
            c.id.to_string(),
            c.status.as_str().to_string(),
            c.value.clone(),
        ]);
    }
    let mut out = t.render();
    for c in checks
        .iter()
        .filter(|c| c.status != rtlab_lab::check::Status::Ok)
    {
        out.push_str(&format!("\n{} {}: {}\n", c.status.as_str(), c.id, c.why));
        if !c.fix.is_empty() {
            out.push_str(&format!("  fix: {}\n", c.fix));
        }
    }
    let top = top_actions(checks, 3);
    if !top.is_empty() {
        out.push_str("\nthe tuning actions that matter most here:\n");
        for (i, c) in top.iter().enumerate() {
            out.push_str(&format!("  {}. {} ({})\n", i + 1, c.fix, c.id));
        }
    }
    out
}

pub fn run(args: CheckArgs) -> anyhow::Result<Status> {
    let outputs = Outputs {
        json: args.json.clone(),
        gates: args.fail_on.map(Gate::CheckAt).into_iter().collect(),
        ..Outputs::default()
    };
    outputs.validate()?;
    let started = rtlab_sys::time::realtime_now_ns();
    let clock = std::time::Instant::now();
    let checks = run_checks();
    let mut doc = standalone_doc(
        "check",
        started,
        Nanos(clock.elapsed().as_nanos() as u64),
        vec![],
        vec![],
        as_series(&checks),
    );
    doc.verdict
        .set_top_actions(&rtlab_lab::check::as_top_actions(&checks, 3));
    outputs.finish(&mut doc, &render(&checks))
}
