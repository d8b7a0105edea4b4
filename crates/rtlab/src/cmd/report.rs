//! `rtlab report FILE.json... -o DIR`.

use crate::cli::ReportArgs;
use crate::{BadInput, Status};
use rtlab_stats::result::ResultDoc;

pub fn run(args: ReportArgs) -> anyhow::Result<Status> {
    let mut docs = Vec::new();
    for path in &args.files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
        let doc: ResultDoc = serde_json::from_str(&text).map_err(|e| {
            BadInput(format!(
                "{}: not an rtlab result document ({e})",
                path.display()
            ))
        })?;
        docs.push(doc);
    }
    rtlab_report::check_writable_dir(&args.out).map_err(|e| BadInput(format!("--out {e}")))?;
    let html = rtlab_report::html::render(&docs);
    let path = args.out.join("report.html");
    rtlab_report::atomic_write(&path, html.as_bytes())?;
    println!(
        "report: {} ({} documents, {} charts)",
        path.display(),
        docs.len(),
        rtlab_report::html::chart_count(&html)
    );
    Ok(Status::Ok)
}
