//! `rtlab survey`: check the machine end to end and write a report directory.

use crate::cli::SurveyArgs;
use crate::output::{result_doc, Console, Gate, Outputs};
use crate::{BadInput, Status};
use rtlab_lab::survey::{run_survey, SurveyConfig};
use rtlab_stats::area::SurveyStage;
use rtlab_stats::Nanos;
use rtlab_sys::affinity::usable_cpus;

pub fn run(args: SurveyArgs) -> anyhow::Result<Status> {
    let mut gates: Vec<Gate> = args
        .fail_area
        .iter()
        .map(|(area, limit)| Gate::AreaAbove {
            flag: "fail-area",
            stage: *area,
            limit: *limit,
        })
        .collect();
    if let Some(limit) = args.fail_above {
        gates.push(Gate::AreaAbove {
            flag: "fail-above",
            stage: SurveyStage::WakeupLoaded,
            limit,
        });
    }
    gates.extend(args.fail_on.map(Gate::CheckAt));
    let outputs = Outputs {
        json: Some(args.out.join("report.json")),
        hgrm: Some(args.out.clone()),
        fail_above: None,
        gates,
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
    let mut console = Console::new(args.quiet).status_every(args.status_every);
    // The stages after the two wakeup ones, as the survey runs them.
    let rest: Vec<&str> = rtlab_stats::area::SurveyStage::ALL
        .iter()
        .filter(|s| s.area() != rtlab_stats::area::Area::Wakeup)
        .map(|s| s.name())
        .collect();
    console.note(&format!(
        "survey on CPUs {}: check, wakeup idle ({}), wakeup under load {} ({}, explained), then {} (up to 4 s each)",
        config.cpus,
        config.stage_duration,
        rtlab_lab::survey::LOADED_STAGE_LOADS.join(" + "),
        config.stage_duration,
        rest.join(", "),
    ));
    let checks = rtlab_lab::check::run_checks();
    let survey = run_survey(&config, &mut console)?;
    console.finish();
    let rows: Vec<_> = survey
        .verdict_rows
        .into_iter()
        .map(rtlab_report::cause::survey_row)
        .collect();
    let mut doc = result_doc("survey", survey.record);
    // The tables show the measurements; the check's series go to the report only.
    let mut text = rtlab_report::table::summary(&doc);
    doc.series
        .splice(0..0, rtlab_lab::check::as_series(&checks));
    doc.verdict.set_survey_rows(&rows);
    let actions = rtlab_lab::check::top_actions(&checks, 3);
    doc.verdict
        .set_top_actions(&rtlab_lab::check::as_top_actions(&checks, 3));
    text.push('\n');
    text.push_str(&rtlab_report::table::survey::verdict(&rows));
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
