//! Typed parts of the result document that commands add to `verdict` and to a series'
//! `config`: written and read through these types, so each key is spelled once (the JSON is
//! the same as when they were built by hand).

use crate::area::Area;
use crate::result::{Series, Verdict};
use serde::{Deserialize, Serialize};

/// A type whose fields sit directly in a series' config, read back (None when they do not
/// parse) ...
fn flat_of<T: serde::de::DeserializeOwned>(series: &Series) -> Option<T> {
    serde_json::from_value(serde_json::Value::Object(series.config.clone())).ok()
}

/// ... and written there.
fn flat_into(value: &impl Serialize, mut series: Series) -> Series {
    if let Ok(serde_json::Value::Object(map)) = serde_json::to_value(value) {
        series.config.extend(map);
    }
    series
}

/// A cause and its share of the time of the outliers it was counted over: typed
/// ([`CauseKey`](crate::cause::CauseKey)) as the lab counts it, named (`preempted by
/// rtlab-hog`, `timer interrupt late while make ran`, ...) as the report layer words it for
/// the document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CauseShare<C = String> {
    /// The cause.
    pub cause: C,
    /// Its share, 0 to 1.
    pub share: f64,
}

/// One area of the survey's verdict (`verdict.survey[]`): a plain reading, and for the
/// wakeup area its idle and loaded latencies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurveyRow {
    /// Which area.
    pub area: Area,
    /// The worst p99 / max of the idle and loaded wakeup stages (ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_p99_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_max_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_p99_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_max_ns: Option<u64>,
    /// Loaded max / idle max.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_over_idle: Option<f64>,
    /// The main causes of the worst loaded wakeups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_causes: Option<Vec<CauseShare>>,
    /// One plain sentence.
    #[serde(default)]
    pub reading: String,
}

impl SurveyRow {
    /// An area with a reading only.
    pub fn reading(area: Area, reading: String) -> SurveyRow {
        SurveyRow {
            area,
            idle_p99_ns: None,
            idle_max_ns: None,
            loaded_p99_ns: None,
            loaded_max_ns: None,
            loaded_over_idle: None,
            top_causes: None,
            reading,
        }
    }
}

/// A survey area's row before its causes are worded: the lab's row, and the causes that took
/// most of its outliers' time, which the report layer adds to its reading (and may list in
/// `top_causes`).
#[derive(Debug, Clone, PartialEq)]
pub struct RowWithCauses {
    /// The row; its reading is the sentence before the causes.
    pub row: SurveyRow,
    /// The causes, where the area names them.
    pub causes: Option<ReadingCauses>,
}

impl From<SurveyRow> for RowWithCauses {
    fn from(row: SurveyRow) -> Self {
        RowWithCauses { row, causes: None }
    }
}

/// The causes a reading names: `lead` and the causes with their shares when there are any,
/// then `rest` either way.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReadingCauses {
    /// Said before the causes ("; the 20 longest went to ").
    pub lead: String,
    /// The causes, most first.
    pub shares: Vec<CauseShare<crate::cause::CauseKey>>,
    /// The rest of the reading.
    pub rest: String,
    /// Also listed in the row's `top_causes` (empty when there are none).
    pub listed: bool,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CheckStatus {
    /// Fine for real-time work.
    Ok,
    /// Costs latency; worth fixing.
    Warn,
    /// Rules out bounded latency.
    Fail,
    /// Could not be checked here.
    Skipped,
}

impl CheckStatus {
    /// Every status.
    pub const ALL: [CheckStatus; 4] = [
        CheckStatus::Ok,
        CheckStatus::Warn,
        CheckStatus::Fail,
        CheckStatus::Skipped,
    ];

    /// `ok`, `warn`, `fail`, `skipped`.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
            CheckStatus::Skipped => "skipped",
        }
    }

    /// The status named `text`.
    pub fn from_name(text: &str) -> Option<CheckStatus> {
        CheckStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl Serialize for CheckStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A status read from a result file: none for a missing key, a status this version does not
/// know, or anything but a string.
fn lenient_status<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<CheckStatus>, D::Error> {
    lenient(d).map(|s| CheckStatus::from_name(&s))
}

/// One of the tuning actions that matter most (`verdict.top_actions[]`; read from a file, a
/// missing key is empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TopAction {
    /// The check's id.
    pub check: String,
    /// Its status (`warn`, `fail`).
    #[serde(deserialize_with = "lenient_status")]
    pub status: Option<CheckStatus>,
    /// The fix.
    pub fix: String,
}

/// What a `check/<id>` series' config says (`status`, `value`, `fix`, `why`). Read from a
/// result file, a key that is missing or not a string reads as empty (a status as none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckFinding {
    /// How the check came out.
    #[serde(default, deserialize_with = "lenient_status")]
    pub status: Option<CheckStatus>,
    /// What was found.
    #[serde(default, deserialize_with = "lenient")]
    pub value: String,
    /// The fix (empty: none needed).
    #[serde(default, deserialize_with = "lenient")]
    pub fix: String,
    /// Why it matters.
    #[serde(default, deserialize_with = "lenient")]
    pub why: String,
}

/// A string, or empty for anything else.
fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        _ => String::new(),
    })
}

impl CheckFinding {
    /// The finding of a `check/<id>` series.
    pub fn of(series: &Series) -> CheckFinding {
        flat_of(series).unwrap_or_default()
    }

    /// `series` with this finding in its config.
    pub fn into_config_of(self, series: Series) -> Series {
        flat_into(&self, series)
    }
}

/// A `net` stream's counters (a series' `counters` config, and what the peer reports of a
/// reverse stream).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamCounters {
    /// Messages sent.
    pub sent: u64,
    /// Acknowledgements received.
    pub acked: u64,
    /// Sent but never acknowledged.
    pub lost: u64,
    /// Acknowledgements seen twice.
    pub duplicates: u64,
    /// Acknowledgements that arrived after a later one.
    pub reordered: u64,
    /// Round trips over the deadline.
    pub deadline_misses: u64,
    /// Messages sent during the warm-up and not recorded.
    pub warmup_trimmed: u64,
    /// Segments TCP retransmitted (from TCP_INFO).
    pub retransmits: Option<u64>,
    /// Padding bytes per message.
    pub pad_bytes: usize,
}

const COUNTERS: &str = "counters";

impl StreamCounters {
    /// The counters in `series`' config, if it has them.
    pub fn of(series: &Series) -> Option<StreamCounters> {
        serde_json::from_value(series.config.get(COUNTERS)?.clone()).ok()
    }

    /// `series` with these counters in its config.
    pub fn into_config_of(self, series: Series) -> Series {
        series.with_config(COUNTERS, serde_json::to_value(self).unwrap_or_default())
    }
}

/// Whether an `invert` variant's waits stayed within the bound its protocol promises (in the
/// variant's series config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitBound {
    /// The bound (ns).
    pub bound_ns: u64,
    /// The longest wait was within it.
    pub bounded: bool,
    /// By how much the longest wait exceeded it (0 when bounded).
    pub exceeded_by_ns: u64,
}

impl WaitBound {
    /// The bound in `series`' config, if it has one.
    pub fn of(series: &Series) -> Option<WaitBound> {
        flat_of(series)
    }

    /// `series` with this bound in its config.
    pub fn into_config_of(self, series: Series) -> Series {
        flat_into(&self, series)
    }
}

/// One cell of a `slack` sweep: which sleep, under which slack (a series' config).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlackCell {
    /// The sleeping call (`nanosleep`, `clock_nanosleep`, `poll`, ...).
    pub mechanism: String,
    /// The sleep asked for (ns).
    pub requested_ns: u64,
    /// The thread's timer slack (ns).
    pub timer_slack_ns: u64,
    /// `other`, or `fifo` for the SCHED_FIFO row (no slack applies).
    pub policy: String,
}

impl SlackCell {
    /// The cell of `series`, if its config names one.
    pub fn of(series: &Series) -> Option<SlackCell> {
        flat_of(series)
    }

    /// `series` with this cell in its config.
    pub fn into_config_of(self, series: Series) -> Series {
        flat_into(&self, series)
    }

    /// The sweep table's row: the mechanism, marked when under SCHED_FIFO.
    pub fn row(&self) -> String {
        if self.policy == "fifo" {
            format!("{} (FIFO)", self.mechanism)
        } else {
            self.mechanism.clone()
        }
    }
}

/// The worst latency of each window of a run, from its start (a wakeup series' `timeline`
/// config), for the report's latency-over-time chart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    /// Width of a window (ns).
    pub step_ns: u64,
    /// The worst of each window (ns).
    pub max_ns: Vec<u64>,
}

const TIMELINE: &str = "timeline";

/// A [`Timeline`] of a run whose length is not known in advance (a watch): windows of
/// [`WorstPerWindow::FIRST_STEP_NS`] at first; when [`WorstPerWindow::MOST`] are filled, every
/// two merge into one twice as wide, so an hour's run holds as many windows as a minute's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorstPerWindow {
    step_ns: u64,
    max_ns: Vec<u64>,
}

impl Default for WorstPerWindow {
    fn default() -> Self {
        WorstPerWindow {
            step_ns: Self::FIRST_STEP_NS,
            max_ns: Vec::new(),
        }
    }
}

impl WorstPerWindow {
    /// The first windows' width: 100 ms, as a wakeup run's shortest.
    pub const FIRST_STEP_NS: u64 = 100_000_000;
    /// Windows at most (a wakeup run's too).
    pub const MOST: usize = 1000;

    /// `value` (ns) at `at_ns` from the run's start, into its window's worst.
    pub fn record(&mut self, at_ns: u64, value: u64) {
        while at_ns / self.step_ns >= Self::MOST as u64 {
            self.widen();
        }
        let slot = (at_ns / self.step_ns) as usize;
        if slot >= self.max_ns.len() {
            self.max_ns.resize(slot + 1, 0);
        }
        self.max_ns[slot] = self.max_ns[slot].max(value);
    }

    /// Every two windows into one twice as wide.
    fn widen(&mut self) {
        self.step_ns *= 2;
        self.max_ns = self
            .max_ns
            .chunks(2)
            .map(|w| w.iter().copied().max().unwrap_or(0))
            .collect();
    }

    /// The timeline so far (None before the first value).
    pub fn timeline(&self) -> Option<Timeline> {
        (!self.max_ns.is_empty()).then(|| Timeline {
            step_ns: self.step_ns,
            max_ns: self.max_ns.clone(),
        })
    }
}

impl Timeline {
    /// The timeline of `series`, if it has one.
    pub fn of(series: &Series) -> Option<Timeline> {
        serde_json::from_value(series.config.get(TIMELINE)?.clone()).ok()
    }

    /// `series` with this timeline in its config.
    pub fn into_config_of(self, series: Series) -> Series {
        series.with_config(TIMELINE, serde_json::to_value(self).unwrap_or_default())
    }
}

const SURVEY: &str = "survey";
const TOP_ACTIONS: &str = "top_actions";

impl Verdict {
    /// The survey's rows (none in other documents, or when they do not parse).
    pub fn survey_rows(&self) -> Vec<SurveyRow> {
        self.detail(SURVEY).unwrap_or_default()
    }

    /// Sets the survey's rows.
    pub fn set_survey_rows(&mut self, rows: &[SurveyRow]) {
        self.set_detail(SURVEY, rows);
    }

    /// The tuning actions that matter most.
    pub fn top_actions(&self) -> Vec<TopAction> {
        self.detail(TOP_ACTIONS).unwrap_or_default()
    }

    /// Sets them.
    pub fn set_top_actions(&mut self, actions: &[TopAction]) {
        self.set_detail(TOP_ACTIONS, actions);
    }

    fn detail<T: serde::de::DeserializeOwned>(&self, key: &str) -> Option<T> {
        serde_json::from_value(self.details.get(key)?.clone()).ok()
    }

    fn set_detail<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) {
        if let Ok(v) = serde_json::to_value(value) {
            self.details.insert(key.into(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_check_status_is_written_by_name_and_read_leniently() {
        for status in CheckStatus::ALL {
            let finding = CheckFinding {
                status: Some(status),
                ..CheckFinding::default()
            };
            let json = serde_json::to_value(&finding).unwrap();
            assert_eq!(json["status"], json!(status.as_str()));
            assert_eq!(
                serde_json::from_value::<CheckFinding>(json).unwrap(),
                finding
            );
        }
        for unknown in [json!("<b>"), json!(7), json!(null)] {
            let finding: CheckFinding =
                serde_json::from_value(json!({"status": unknown, "value": "v"})).unwrap();
            assert_eq!((finding.status, finding.value.as_str()), (None, "v"));
        }
        let action: TopAction = serde_json::from_value(json!({"check": "c"})).unwrap();
        assert_eq!(action.status, None);
    }

    #[test]
    fn survey_rows_keep_the_hand_built_json() {
        let wakeup = SurveyRow {
            area: Area::Wakeup,
            idle_p99_ns: Some(10),
            idle_max_ns: Some(20),
            loaded_p99_ns: Some(30),
            loaded_max_ns: Some(40),
            loaded_over_idle: Some(2.0),
            top_causes: Some(vec![]),
            reading: "fine".into(),
        };
        assert_eq!(
            serde_json::to_value(&wakeup).unwrap(),
            json!({"area": "wakeup", "idle_p99_ns": 10, "idle_max_ns": 20, "loaded_p99_ns": 30,
                   "loaded_max_ns": 40, "loaded_over_idle": 2.0, "top_causes": [],
                   "reading": "fine"})
        );
        assert_eq!(
            serde_json::to_value(SurveyRow::reading(Area::Lock, "ok".into())).unwrap(),
            json!({"area": "lock", "reading": "ok"})
        );
        let mut v = Verdict::default();
        v.set_survey_rows(std::slice::from_ref(&wakeup));
        assert_eq!(v.survey_rows(), vec![wakeup]);
        v.details.insert("survey".into(), json!("not rows"));
        assert!(
            v.survey_rows().is_empty(),
            "a malformed detail reads as none"
        );
    }

    #[test]
    fn a_timeline_of_unknown_length_widens_its_windows_and_keeps_each_worst() {
        let mut w = WorstPerWindow::default();
        assert_eq!(w.timeline(), None);
        w.record(50_000_000, 7);
        w.record(60_000_000, 9);
        w.record(250_000_000, 3);
        let t = w.timeline().unwrap();
        assert_eq!((t.step_ns, t.max_ns), (100_000_000, vec![9, 0, 3]));
        // Past 1000 windows of 100 ms (100 s): windows of 200 ms, each the worst of two.
        w.record(100_000_000_000, 5);
        let t = w.timeline().unwrap();
        assert_eq!(t.step_ns, 200_000_000);
        assert_eq!(&t.max_ns[..2], &[9, 3]);
        assert_eq!(t.max_ns.len(), 501);
        assert_eq!(t.max_ns[500], 5);
        // An hour: still at most 1000 windows.
        w.record(3_600_000_000_000, 1);
        assert!(w.timeline().unwrap().max_ns.len() <= WorstPerWindow::MOST);
    }
}
