//! `rtlab survey`: check the machine end to end and write a report directory.

use crate::cli::SurveyArgs;
use crate::output::{result_doc, Console, Outputs};
use crate::{BadInput, Status};
use rtlab_lab::survey::{run_survey, SurveyConfig};
use rtlab_report::table::Table;
use rtlab_stats::Nanos;
use rtlab_sys::affinity::usable_cpus;
use serde_json::Value;

fn ns_cell(row: &Value, key: &str) -> String {
    row[key]
        .as_u64()
        .map_or_else(|| "-".into(), |v| Nanos(v).to_string())
}

/// The verdict table, rendered from `verdict.survey` of the document.
pub fn verdict_table(rows: &[Value]) -> String {
    let mut t = Table::new(&[
        "area",
        "idle p99",
        "idle max",
        "loaded p99",
        "loaded max",
        "loaded/idle",
    ]);
    let mut readings = String::new();
    for row in rows {
        let area = row["area"].as_str().unwrap_or("?").to_string();
        if row.get("idle_max_ns").is_none() {
            // Areas without idle/loaded latencies (lock) only have a reading.
            if let Some(r) = row["reading"].as_str() {
                readings.push_str(&format!("{area}: {r}\n"));
            }
            continue;
        }
        t.row(vec![
            area.clone(),
            ns_cell(row, "idle_p99_ns"),
            ns_cell(row, "idle_max_ns"),
            ns_cell(row, "loaded_p99_ns"),
            ns_cell(row, "loaded_max_ns"),
            row["loaded_over_idle"]
                .as_f64()
                .map_or("-".into(), |r| format!("{r:.1}x")),
        ]);
        if let Some(r) = row["reading"].as_str() {
            readings.push_str(&format!("{area}: {r}\n"));
        }
    }
    format!("{}\n{readings}", t.render())
}

pub fn run(args: SurveyArgs) -> anyhow::Result<Status> {
    let outputs = Outputs {
        json: Some(args.out.join("report.json")),
        hgrm: Some(args.out.clone()),
        fail_above: None,
    };
    // The report directory is created up front so an unwritable --out fails before measuring.
    rtlab_report::check_writable_dir(&args.out).map_err(|e| BadInput(format!("--out {e}")))?;
    outputs.validate()?;
    let config = SurveyConfig {
        stage_duration: if args.quick {
            Nanos::from_secs(4)
        } else {
            args.duration
        },
        cpus: args.cpus.unwrap_or_else(usable_cpus),
        mlock: !args.no_mlock,
        dma_latency: !args.no_dma_latency,
    };
    let mut console = Console::new(args.quiet);
    console.note(&format!(
        "survey on CPUs {}: check, wakeup idle ({}), wakeup under load {} ({}, explained), then lock, invert, mmap, slack, ipc, net (up to 4 s each)",
        config.cpus,
        config.stage_duration,
        rtlab_lab::survey::LOADED_STAGE_LOADS.join(" + "),
        config.stage_duration,
    ));
    let checks = rtlab_lab::check::run_checks(std::time::Duration::from_millis(500));
    let survey = run_survey(&config, &mut console)?;
    console.finish();
    let mut doc = result_doc("survey", survey.record);
    // The tables show the measurements; the check's series go to the report only.
    let mut text = rtlab_report::table::summary(&doc);
    doc.series
        .splice(0..0, rtlab_lab::check::as_series(&checks));
    doc.verdict
        .details
        .insert("survey".into(), Value::Array(survey.verdict_rows.clone()));
    let actions = rtlab_lab::check::top_actions(&checks, 3);
    doc.verdict.details.insert(
        "top_actions".into(),
        serde_json::json!(actions
            .iter()
            .map(|c| serde_json::json!({"check": c.id, "status": c.status.as_str(), "fix": c.fix}))
            .collect::<Vec<_>>()),
    );
    text.push('\n');
    text.push_str(&verdict_table(&survey.verdict_rows));
    if !actions.is_empty() {
        text.push_str("\nthe tuning actions that matter most here (rtlab check explains each):\n");
        for (i, c) in actions.iter().enumerate() {
            text.push_str(&format!(
                "  {}. {} ({} {})\n",
                i + 1,
                c.fix,
                c.id,
                c.status.as_str()
            ));
        }
    }
    text.push_str(&format!(
        "report: {} and {}\n",
        args.out.join("report.html").display(),
        args.out.join("report.json").display()
    ));
    let status = outputs.finish(&mut doc, &text)?;
    rtlab_report::atomic_write(
        &args.out.join("report.html"),
        rtlab_report::html::render(std::slice::from_ref(&doc)).as_bytes(),
    )?;
    Ok(status)
}
