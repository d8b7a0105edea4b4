//! `rtlab diff A.json B.json`.

use crate::cli::DiffArgs;
use crate::output::{standalone_doc, Outputs};
use crate::{BadInput, Status};
use rtlab_report::diff::{self, Change};
use rtlab_report::table::Table;
use rtlab_stats::result::{ResultDoc, Unit};
use rtlab_stats::Nanos;
use std::path::Path;

fn read(path: &Path) -> Result<ResultDoc, BadInput> {
    super::read_doc(path)
}

fn cell(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Ns => Nanos(v as u64).to_string(),
        Unit::OpsPerSec => format!("{v:.0} ops/s"),
        Unit::BytesPerSec => format!("{v:.0} B/s"),
        Unit::Ratio | Unit::Count => format!("{v:.3}"),
    }
}

fn table(changes: &[Change]) -> String {
    let mut t = Table::new(&["series", "stat", "A", "B", "B/A", "", "verdict"]);
    for c in changes {
        let mark = match c.significant {
            Some(true) => "*",
            Some(false) => "",
            None => "?",
        };
        let verdict = c.verdict();
        t.row(vec![
            c.series.clone(),
            c.stat.to_string(),
            cell(c.a, c.unit),
            cell(c.b, c.unit),
            format!("{:.3}", c.ratio),
            mark.to_string(),
            verdict.to_string(),
        ]);
    }
    t.render()
}

/// What makes two runs unlike: another command, length, load or machine.
fn unlike_runs(a: &ResultDoc, b: &ResultDoc) -> Vec<String> {
    let mut warnings = Vec::new();
    if a.command != b.command {
        warnings.push(format!(
            "comparing a '{}' run with a '{}' run",
            a.command, b.command
        ));
    }
    let (da, db) = (a.duration_s.max(1e-3), b.duration_s.max(1e-3));
    if da.max(db) / da.min(db) > 1.5 {
        warnings.push(format!(
            "A ran {da:.1} s and B {db:.1} s ({:.1}x): the shorter run's p99.9 and max come \
             from fewer samples",
            da.max(db) / da.min(db)
        ));
    }
    let loads = |d: &ResultDoc| {
        let mut l: Vec<String> = d.load.iter().map(|l| l.spec.clone()).collect();
        l.sort();
        match l.is_empty() {
            true => "no load".to_string(),
            false => l.join(", "),
        }
    };
    if loads(a) != loads(b) {
        warnings.push(format!(
            "A ran beside {} and B beside {}",
            loads(a),
            loads(b)
        ));
    }
    let host = |d: &ResultDoc| {
        format!(
            "kernel {}, {} CPUs, {}",
            d.system.kernel, d.system.cpus, d.system.preempt_model
        )
    };
    if host(a) != host(b) {
        warnings.push(format!("A ran on {} and B on {}", host(a), host(b)));
    }
    warnings
}

pub fn run(args: DiffArgs) -> anyhow::Result<Status> {
    let outputs = Outputs {
        json: args.json.clone(),
        ..Outputs::default()
    };
    outputs.validate()?;
    let (a, b) = (read(&args.a)?, read(&args.b)?);
    let changes = diff::compare(&a.series, &b.series);
    if changes.is_empty() {
        return Err(BadInput(format!(
            "{} and {} have no series in common (same command and series names needed)",
            args.a.display(),
            args.b.display()
        ))
        .into());
    }
    let mut text = format!(
        "A: {} ({} {}), B: {} ({} {})\n",
        args.a.display(),
        a.command,
        a.started_at,
        args.b.display(),
        b.command,
        b.started_at
    );
    text.push_str(&table(&changes));
    text.push_str(
        "*: the 95 % intervals of the two percentiles (order statistics of the histograms) do not \
         overlap; ?: no interval for this statistic (max, single values)\n",
    );
    let failed = args.fail_worse.map(|pct| diff::gate(&changes, pct));
    let mut warnings = unlike_runs(&a, &b);
    if changes.iter().any(|c| c.verdict() == "fewer samples") {
        text.push_str(&format!(
            "fewer samples: the lower max is from a run with {}x or more fewer samples (the \
             largest of n samples grows with n): run both as long to compare them\n",
            diff::FEWER_SAMPLES
        ));
    }
    // A histogram that does not decode (damaged, or hostile: it is refused before anything
    // is allocated for it) leaves its series without significance marks; say which.
    for (path, doc) in [(&args.a, &a), (&args.b, &b)] {
        for s in &doc.series {
            if let Some(Err(e)) = s.decode_histogram() {
                warnings.push(format!(
                    "{}: series '{}': histogram unreadable ({e}); compared without significance",
                    path.display(),
                    s.name
                ));
            }
        }
    }
    let mut doc = standalone_doc(
        "diff",
        rtlab_sys::time::realtime_now_ns(),
        Nanos(0),
        vec![],
        warnings.clone(),
        diff::as_series(
            &changes,
            &args.a.to_string_lossy(),
            &args.b.to_string_lossy(),
        ),
    );
    if let (Some(pct), Some(failed)) = (args.fail_worse, &failed) {
        doc.verdict
            .details
            .insert("fail_worse_pct".into(), serde_json::json!(pct));
        doc.verdict.details.insert(
            "worse".into(),
            serde_json::json!(failed
                .iter()
                .map(|c| format!("{}/{}", c.series, c.stat))
                .collect::<Vec<_>>()),
        );
    }
    for w in &warnings {
        eprintln!("warning: {}", rtlab_report::printable(w));
    }
    let status = outputs.finish(&mut doc, &text)?;
    match (args.fail_worse, failed) {
        (Some(pct), Some(failed)) if !failed.is_empty() => {
            for c in failed {
                eprintln!(
                    "fail-worse: {}/{} {:.3}x ({} -> {}) is worse by more than {pct} %",
                    rtlab_report::printable(&c.series),
                    c.stat,
                    c.ratio,
                    cell(c.a, c.unit),
                    cell(c.b, c.unit)
                );
            }
            Ok(Status::GateHit)
        }
        _ => Ok(status),
    }
}
