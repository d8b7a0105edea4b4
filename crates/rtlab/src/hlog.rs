//! HdrHistogram interval logs (`--hlog`): the format jHiccup and HdrHistogram's log tools
//! (HistogramLogProcessor, HdrHistogramVisualizer) read, written as the run goes so a log can
//! be followed while it grows and survives a crash up to its last interval.

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use std::path::Path;
use std::sync::mpsc::{channel, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// Opens `path` for a log: created when missing, appended to when there (each run adds a
/// log section with its own header and start time, as HdrHistogram's log readers expect of
/// a log several runs wrote), never through a link nor into another user's file.
pub fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    rtlab_sys::fs::open_append(path)
}

/// An interval log tag: the series name without the characters the format reserves.
pub fn hlog_tag(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c == ',' || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// One interval histogram on its way to the log.
struct Entry {
    tag: String,
    start: Duration,
    length: Duration,
    hist: Histogram<u64>,
}

/// An interval log written by a thread of its own, so whoever hands it histograms never
/// waits for the disk (and the log writer's borrows stay on that thread's stack).
#[derive(Debug)]
pub struct HlogWriter {
    entries: Option<Sender<Entry>>,
    thread: Option<JoinHandle<anyhow::Result<()>>>,
}

impl HlogWriter {
    /// Creates the log at `path` with a comment line, its start time now.
    pub fn create(path: &Path, comment: &str) -> anyhow::Result<HlogWriter> {
        let mut file =
            open_log(path).map_err(|e| anyhow::anyhow!("--hlog {}: {e}", path.display()))?;
        let comment = comment.to_string();
        let (tx, rx) = channel::<Entry>();
        let thread = std::thread::Builder::new()
            .name("rtlab-hlog".into())
            .spawn(move || {
                let mut serializer = V2DeflateSerializer::new();
                let mut log = IntervalLogWriterBuilder::new()
                    .add_comment(&comment)
                    .with_start_time(std::time::SystemTime::now())
                    .begin_log_with(&mut file, &mut serializer)?;
                for e in rx {
                    log.write_histogram(&e.hist, e.start, e.length, Tag::new(&e.tag))?;
                }
                Ok(())
            })?;
        Ok(HlogWriter {
            entries: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues one series' histogram of the interval `[start, start + length)` (times from
    /// the log's start).
    pub fn write(&self, series: &str, start: Duration, length: Duration, hist: &Histogram<u64>) {
        if let Some(tx) = &self.entries {
            // A writer that failed has said why in its result; nothing to do here.
            let _ = tx.send(Entry {
                tag: hlog_tag(series),
                start,
                length,
                hist: hist.clone(),
            });
        }
    }

    /// Writes what is queued and closes the log.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.entries.take();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => Err(anyhow::anyhow!("--hlog: {e}")),
            Some(Err(_)) => Err(anyhow::anyhow!("--hlog: the log writer panicked")),
            _ => Ok(()),
        }
    }
}

impl Drop for HlogWriter {
    fn drop(&mut self) {
        // An early return still leaves every queued interval on disk.
        self.entries.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
