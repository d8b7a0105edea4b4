//! `rtlab report FILE.json... -o DIR`.

use crate::cli::ReportArgs;
use crate::{BadInput, Status};

pub fn run(args: ReportArgs) -> anyhow::Result<Status> {
    let mut docs = Vec::new();
    for path in &args.files {
        docs.push(super::read_doc(path)?);
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
