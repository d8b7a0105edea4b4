//! For tests: a test that cannot run what it tests here says so, and why, where the person
//! who ran the tests will read it.

/// The file `say_skipped` appends to, named by the test command (`tools/test`), which prints
/// what it holds at the end of the run.
pub const SKIPPED_LOG: &str = "RTLAB_SKIPPED_LOG";

/// Says on stderr that the calling test did not run what it tests, and why (`skipped: <why>`,
/// after the test's name), and adds the line, with the test binary's name, to the file
/// [`SKIPPED_LOG`] names: cargo hides a passing test's output, the summary does not.
pub fn say_skipped(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    eprintln!("{test}: skipped: {why}");
    let Some(path) = std::env::var_os(SKIPPED_LOG) else {
        return;
    };
    // The test binary's name without cargo's hash (`watch-601e70...` -> `watch`).
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| n.rsplit_once('-').map_or(n.clone(), |(b, _)| b.to_string()))
        .unwrap_or_default();
    use std::io::Write;
    let line = format!("{binary}: {test}: {why}\n");
    // One write in append mode: lines of tests running at once do not mix.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}
