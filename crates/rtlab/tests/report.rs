//! `rtlab report` and the survey's report.html: self-contained, with the plots, and rendered
//! without a console error by a headless browser (Debian chromium) when one is installed.

mod common;

use std::path::Path;

use common::*;
use std::process::Command;

#[test]
fn report_html_is_self_contained_has_the_plots_and_renders_cleanly() {
    let _serial = realtime_serial();
    let dir = tempfile::tempdir().unwrap();
    let wakeup = rtlab_doc(
        dir.path(),
        "w.json",
        &[
            "wakeup",
            "--policy",
            "other",
            "--threads",
            "2",
            "--duration",
            "500ms",
            "--quiet",
        ],
    );
    let pp = rtlab_doc(
        dir.path(),
        "p.json",
        &[
            "net",
            "pingpong",
            "--policy",
            "other",
            "--duration",
            "600ms",
            "--quiet",
        ],
    );
    let check = rtlab_doc(dir.path(), "c.json", &["check"]);
    // A watch's document (as root), first (in the screenshots): its latency over time
    // drawn as lines, its worst delay of each window, under the outliers' circles.
    let watched = is_root().then(|| {
        let path = dir.path().join("watch.json");
        let loop_ms = "import time\nfor _ in range(800): time.sleep(0.001)";
        let out = (rtlab().args(["watch", "--quiet", "--json"]).arg(&path))
            .args(["--", "python3", "-c", loop_ms])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        path
    });
    let mut docs: Vec<&Path> = watched.as_deref().into_iter().collect();
    docs.extend([wakeup.as_path(), &pp, &check]);
    let out_dir = dir.path().join("rep");
    let html = report_html(&docs, &out_dir);
    let charts = html.matches("<svg class=\"chart\"").count();
    assert!(charts >= 4, "{charts} charts");
    if watched.is_some() {
        assert!(html.contains("latency over time"), "a watch's time chart");
        assert!(html.contains(": worst latency per "), "drawn as lines");
    }
    assert!(html.contains("latency by percentile") && html.contains("latency histogram"));
    assert!(html.contains("preempt_model"), "the check table");
    for external in ["<script", "http://", "https://", "<link", "@import", "src="] {
        assert!(!html.contains(external), "not self-contained: {external}");
    }

    let bad = rtlab()
        .args(["report", "/nonexistent.json"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));

    render_in_browser(&out_dir.join("report.html"), "report", 2400);
}

#[test]
fn a_quick_survey_writes_the_html_report_with_its_plots() {
    let _serial = realtime_serial();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("quick");
    let started = std::time::Instant::now();
    let out = rtlab()
        .args(["survey", "--quick", "--no-dma-latency", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    eprintln!(
        "survey --quick took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(html.matches("<svg class=\"chart\"").count() >= 4);
    let doc = load_valid_document(&out_dir.join("report.json"));
    assert!(series_names(&doc)
        .iter()
        .any(|n| n == "check/preempt_model"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("report.html"));
    // The whole page, down to the last section's bar charts.
    render_in_browser(&out_dir.join("report.html"), "survey", 12_000);
}

/// Renders `html` in headless chromium (when installed): its DOM has the charts, no console
/// error, and screenshots at a wide and a narrow width are kept under
/// `target/report-screenshots/{name}-{width}.png` (the suite's artefacts, to look at), each
/// `height` pixels tall.
fn render_in_browser(html: &Path, name: &str, height: u32) {
    let Some(browser) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
    else {
        return skip(
            &format!("{name} in a browser"),
            "no chromium (apt-get install chromium)",
        );
    };
    let url = format!("file://{}", html.display());
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let base = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ];
    let dom = Command::new(browser)
        .args(base)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap();
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom_text.matches("<svg class=\"chart\"").count() >= 4,
        "{name}: the browser's DOM has the charts"
    );
    // A wide screen and a narrow one (the charts scale down with the page).
    for width in [1400, 700] {
        let shot = shots.join(format!("{name}-{width}.png"));
        let rendered = Command::new(browser)
            .args(base)
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--screenshot={}", shot.display()))
            .arg(&url)
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&rendered.stderr);
        for line in log
            .lines()
            .chain(String::from_utf8_lossy(&dom.stderr).lines())
        {
            assert!(
                !line.contains("CONSOLE")
                    && !line.contains("ERR_FILE")
                    && !line.contains("Uncaught"),
                "{name}: {line}"
            );
        }
        let png = std::fs::read(&shot).expect("a screenshot");
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 20_000,
            "{name} at {width}: {} bytes",
            png.len()
        );
    }
}
