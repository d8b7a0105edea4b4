//! `rtlab load`: run disturbance loads alone.

use crate::cli::LoadArgs;
use crate::output::{standalone_doc, Console, Outputs};
use crate::Status;
use rtlab_report::table::Table;
use rtlab_stats::result::{LoadEntry, Series, Unit};
use rtlab_stats::Nanos;
use rtlab_sys::time::monotonic_now_ns;

pub fn run(args: LoadArgs) -> anyhow::Result<Status> {
    let outputs = Outputs {
        json: args.json,
        ..Outputs::default()
    };
    outputs.validate()?;
    let mut console = Console::new(args.quiet);
    let started_at_ns = rtlab_sys::time::realtime_now_ns();
    let began = monotonic_now_ns();
    let loads = rtlab_load::start(&args.specs, args.duration)?;
    let mut warnings = Vec::new();
    for w in loads.warnings() {
        rtlab_lab::Observer::warn(&mut console, w);
        warnings.push(w.clone());
    }
    let end = began + args.duration.get();
    while monotonic_now_ns() < end && !rtlab_sys::signal::interrupted() {
        std::thread::sleep(
            std::time::Duration::from_millis(250)
                .min(Nanos(end.saturating_sub(monotonic_now_ns())).as_duration()),
        );
        let elapsed = Nanos(monotonic_now_ns() - began).as_secs_f64();
        let lines: Vec<String> = loads
            .progress()
            .iter()
            .map(|r| {
                format!(
                    "[{elapsed:>6.1}s / {:.1}s] {:<24} {:>14} {}",
                    args.duration.as_secs_f64(),
                    r.spec,
                    r.work,
                    r.unit
                )
            })
            .collect();
        console.draw(&lines);
    }
    let reports = loads.stop();
    let elapsed = Nanos(monotonic_now_ns() - began);
    console.finish();

    let mut table = Table::new(&["load", "work", "unit", "per second"]);
    let mut series = Vec::new();
    for r in &reports {
        let rate = r.work as f64 / elapsed.as_secs_f64().max(1e-9);
        table.row(vec![
            r.spec.clone(),
            r.work.to_string(),
            r.unit.to_string(),
            format!("{rate:.1}"),
        ]);
        series.push(Series::value(
            r.spec.clone(),
            r.unit.replace(' ', "_"),
            Unit::Count,
            r.work as f64,
        ));
    }
    let load = args
        .specs
        .iter()
        .map(|s| LoadEntry {
            spec: s.text.clone(),
            runs_ns: Vec::new(),
        })
        .collect();
    let mut doc = standalone_doc("load", started_at_ns, elapsed, load, warnings, series);
    outputs.finish(&mut doc, &table.render())
}
