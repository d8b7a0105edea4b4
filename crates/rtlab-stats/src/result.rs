//! The result document every `--json` writes (`schema/result.schema.json`, schema_version 1).

use crate::{HistogramError, LatencyHistogram};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The schema version this crate writes.
pub const SCHEMA_VERSION: u32 = 1;

/// The most decoding work ([`crate::histogram::decode_work`]) one document may ask for: about
/// 3 000 of rtlab's own histograms (1 ns to 1 h at 3 digits, ~34 000 counts each); a document
/// that declares more is refused before any histogram of it is decoded (it could otherwise
/// make `diff` or `report` spend minutes on a few megabytes).
pub const MAX_DECODE_WORK: u64 = 128 << 20;

/// One run's complete result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResultDoc {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Which program wrote it.
    pub tool: Tool,
    /// The subcommand (`wakeup`, `survey`, ...).
    pub command: String,
    /// The command line as given.
    pub argv: Vec<String>,
    /// RFC 3339 UTC time the measurement started.
    pub started_at: String,
    /// How long the measurement ran, in seconds.
    pub duration_s: f64,
    /// Facts about the machine.
    pub system: SystemInfo,
    /// The disturbance loads that ran.
    pub load: Vec<LoadEntry>,
    /// Everything that degraded the run (missing privileges, skipped parts).
    pub warnings: Vec<String>,
    /// The measured series.
    pub series: Vec<Series>,
    /// Explained outliers (filled by `--explain`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outliers: Vec<Outlier>,
    /// Run outcome.
    #[serde(default)]
    pub verdict: Verdict,
}

impl ResultDoc {
    /// Refuses a document whose histograms together would cost more than
    /// [`MAX_DECODE_WORK`] to decode (judged from their headers alone).
    pub fn check_decode_work(&self) -> Result<(), HistogramError> {
        let mut total = 0u64;
        for s in &self.series {
            if let Some(h) = &s.histogram {
                // One that is not a sane encoding is refused by its own decode, at once
                // (its series is then compared by its summary alone): it costs nothing here.
                total = total.saturating_add(crate::histogram::decode_work(&h.data).unwrap_or(0));
                if total > MAX_DECODE_WORK {
                    return Err(HistogramError::Decode(format!(
                        "the histograms of {} series and more ask for over {} M entries to \
                         decode, more than rtlab decodes for one document",
                        self.series.len(),
                        MAX_DECODE_WORK >> 20
                    )));
                }
            }
        }
        Ok(())
    }
}

/// `tool` of a result document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Tool {
    /// Always `rtlab`.
    pub name: String,
    /// The crate version.
    pub version: String,
}

/// `system` of a result document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SystemInfo {
    /// Kernel release.
    pub kernel: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Preemption model, e.g. `dynamic(none)`.
    pub preempt_model: String,
    /// Current clocksource.
    pub clocksource: String,
    /// Running under a hypervisor.
    pub virtualized: bool,
    /// What the run was allowed to do.
    pub privileges: PrivilegeInfo,
}

/// `system.privileges` of a result document.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct PrivilegeInfo {
    /// SCHED_FIFO/RR could be used.
    pub rt_sched: bool,
    /// Memory could be locked.
    pub mlock: bool,
    /// tracefs is usable.
    pub tracefs: bool,
}

/// One entry of `load`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LoadEntry {
    /// The load as written on the command line.
    pub spec: String,
    /// When a `hog` load ran: `[from, to]` in ns on the time base of the outliers' `at_ns`
    /// (so an outlier can be checked against what was injected); the first 10 000 runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs_ns: Vec<[u64; 2]>,
}

/// The unit of a series.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
pub enum Unit {
    /// Nanoseconds.
    #[default]
    #[serde(rename = "ns")]
    Ns,
    /// Operations per second.
    #[serde(rename = "ops/s")]
    OpsPerSec,
    /// Bytes per second.
    #[serde(rename = "bytes/s")]
    BytesPerSec,
    /// A plain count.
    #[serde(rename = "count")]
    Count,
    /// A dimensionless ratio.
    #[serde(rename = "ratio")]
    Ratio,
}

/// The encoded buckets of a distribution series.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HistogramData {
    /// Always `hdr-v2-deflate-base64`.
    pub encoding: String,
    /// Base64 of the V2+deflate bytes.
    pub data: String,
}

/// A series: a distribution (count, percentiles, histogram) or a single value.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Series {
    /// Stable identifier that scripts select on (`thread0`, `pi_mutex/uncontended`).
    pub name: String,
    /// What is measured (`wakeup_latency`, `lock_unlock`).
    pub metric: String,
    /// Unit of the numbers.
    pub unit: Unit,
    /// A single value (value series only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Samples, coordinated-omission corrections included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Samples measured (without corrections).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_count: Option<u64>,
    /// Expected samples that never happened (overruns), each recorded as a correction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed: Option<u64>,
    /// Samples that began but could not be measured (the trace events that would have
    /// ended them were lost); not in `count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmeasured: Option<u64>,
    /// Minimum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Mean.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    /// Standard deviation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stddev: Option<f64>,
    /// Median.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    /// 90th percentile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p90: Option<f64>,
    /// 99th percentile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    /// 99.9th percentile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p999: Option<f64>,
    /// 99.99th percentile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p9999: Option<f64>,
    /// Maximum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The buckets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histogram: Option<HistogramData>,
    /// How the series was measured (cpu, interval, policy, prio ...).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub config: Map<String, Value>,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub tags: Map<String, Value>,
}

impl Series {
    /// A distribution series in ns from a histogram, with its encoded buckets.
    pub fn distribution(
        name: impl Into<String>,
        metric: impl Into<String>,
        hist: &LatencyHistogram,
    ) -> Result<Series, HistogramError> {
        let s = hist.summary();
        Ok(Series {
            name: name.into(),
            metric: metric.into(),
            unit: Unit::Ns,
            count: Some(s.count),
            raw_count: Some(s.raw_count),
            missed: Some(s.missed),
            min: Some(s.min as f64),
            mean: Some(s.mean),
            stddev: Some(s.stddev),
            p50: Some(s.p50 as f64),
            p90: Some(s.p90 as f64),
            p99: Some(s.p99 as f64),
            p999: Some(s.p999 as f64),
            p9999: Some(s.p9999 as f64),
            max: Some(s.max as f64),
            histogram: Some(HistogramData {
                encoding: "hdr-v2-deflate-base64".into(),
                data: hist.encode_base64()?,
            }),
            ..Series::default()
        })
    }

    /// A single-value series.
    pub fn value(
        name: impl Into<String>,
        metric: impl Into<String>,
        unit: Unit,
        value: f64,
    ) -> Series {
        Series {
            name: name.into(),
            metric: metric.into(),
            unit,
            value: Some(value),
            ..Series::default()
        }
    }

    /// Adds one `config` entry (builder style).
    pub fn with_config(mut self, key: &str, value: impl Into<Value>) -> Series {
        self.config.insert(key.to_string(), value.into());
        self
    }

    /// True for a distribution series.
    pub fn is_distribution(&self) -> bool {
        self.count.is_some()
    }

    /// Decodes the buckets, if the series carries them.
    pub fn decode_histogram(&self) -> Option<Result<LatencyHistogram, HistogramError>> {
        self.histogram
            .as_ref()
            .map(|h| LatencyHistogram::decode_base64(&h.data))
    }
}

/// The kind of an outlier's cause.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum CauseKind {
    Irq,
    Softirq,
    Nmi,
    Preemption,
    Blocking,
    IdleExit,
    Migration,
    HypervisorGap,
    PageFault,
    Syscall,
    /// rtlab's own threads (the observer: the watch's reader, writers, servers).
    Observer,
    /// A JVM's safepoint: its threads stopped by the JVM itself (a collection, a VM
    /// operation), as HotSpot's probes tell it.
    Safepoint,
    Unexplained,
}

impl CauseKind {
    /// The name used in JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            CauseKind::Irq => "irq",
            CauseKind::Softirq => "softirq",
            CauseKind::Nmi => "nmi",
            CauseKind::Preemption => "preemption",
            CauseKind::Blocking => "blocking",
            CauseKind::IdleExit => "idle_exit",
            CauseKind::Migration => "migration",
            CauseKind::HypervisorGap => "hypervisor_gap",
            CauseKind::PageFault => "page_fault",
            CauseKind::Syscall => "syscall",
            CauseKind::Observer => "observer",
            CauseKind::Safepoint => "safepoint",
            CauseKind::Unexplained => "unexplained",
        }
    }
}

/// One cause of an outlier.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Cause {
    /// What kind of interference.
    pub kind: CauseKind,
    /// How much of the lateness it accounts for.
    pub duration_ns: u64,
    /// The interfering task, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Its pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i64>,
    /// Its priority.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prio: Option<i64>,
    /// Free text (IRQ name, vector ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Which of the explainer's reasons `detail` words (absent in documents of older
    /// versions; a code this version does not know reads as [`ReasonCode::Other`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ReasonCode>,
    /// The longest stretch inside it with no trace event at all (the CPU ran with interrupts
    /// off, or the vCPU was not running): a stall, said as one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_ns: Option<u64>,
}

macro_rules! reason_codes {
    ($($variant:ident = $name:literal,)*) => {
        /// The explainer's reason for a cause, as a stable code (its text is the `detail`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[allow(missing_docs)]
        pub enum ReasonCode {
            $($variant,)*
            /// A code written by a newer version.
            Other,
        }

        impl ReasonCode {
            /// The code in JSON.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ReasonCode::$variant => $name,)*
                    ReasonCode::Other => "other",
                }
            }

            fn from_name(name: &str) -> ReasonCode {
                match name {
                    $($name => ReasonCode::$variant,)*
                    _ => ReasonCode::Other,
                }
            }
        }
    };
}

reason_codes! {
    Interrupt = "interrupt",
    PeerInterrupt = "peer_interrupt",
    Nmi = "nmi",
    HolderRan = "holder_ran",
    WaitingForHolder = "waiting_for_holder",
    PriorityInversion = "priority_inversion",
    RanWhileBlocked = "ran_while_blocked",
    NetStackInversion = "net_stack_inversion",
    IpiLateOnHost = "ipi_late_on_host",
    IpiWaited = "ipi_waited",
    NotifierCall = "notifier_call",
    ThreadItself = "thread_itself",
    IdlePastDeadline = "idle_past_deadline",
    SilentWhileRunning = "silent_while_running",
    SilentLeavingIdle = "silent_leaving_idle",
    SilentWhileSpinning = "silent_while_spinning",
    Throttled = "throttled",
    IdleExitAfterWakeup = "idle_exit_after_wakeup",
    TimerLateWhileRunning = "timer_late_while_running",
    NonPreemptible = "non_preemptible",
    TimerTailIdle = "timer_tail_idle",
    TimerTailLowerPriority = "timer_tail_lower_priority",
    NoSchedulerEvent = "no_scheduler_event",
    EventsLost = "events_lost",
    Unread = "unread",
    NoTick = "no_tick",
    BeforeFirstEvent = "before_first_event",
    HistoryCut = "history_cut",
    NoEvent = "no_event",
    KeptPeerOff = "kept_peer_off",
    PeerIdleGap = "peer_idle_gap",
    PeerIdleExit = "peer_idle_exit",
    PeerAsleep = "peer_asleep",
    PeerUnknown = "peer_unknown",
    TimerSlack = "timer_slack",
    Observer = "observer",
    FairServer = "fair_server",
    JvmSafepoint = "jvm_safepoint",
    AsleepAgain = "asleep_again",
}

impl Serialize for ReasonCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ReasonCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(ReasonCode::from_name(&name))
    }
}

/// An explained outlier.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Outlier {
    /// The series it belongs to.
    pub series: String,
    /// When it happened, ns since the run started.
    pub at_ns: u64,
    /// How late it was.
    pub latency_ns: u64,
    /// The CPU it ran on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    /// For a delay measured to the thread's return to user space (`rtlab watch`): the part
    /// until it got a CPU; the rest it spent in the kernel on its way back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_running_ns: Option<u64>,
    /// Its causes, largest first.
    pub causes: Vec<Cause>,
    /// Kernel stacks, where asked for (`rtlab watch --stacks`): of the late thread where its
    /// delay began, and of the task that ran instead where it gave the CPU back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<KernelStack>,
}

/// A task's kernel stack at a switch away from it, innermost frame first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct KernelStack {
    /// Whose it is, for the outlier.
    pub role: StackRole,
    /// The task's name and TID.
    pub task: String,
    pub pid: i64,
    /// When it left the CPU with this stack, ns since the run started.
    pub at_ns: u64,
    /// `function+0xoffset`, innermost first, from the scheduler's entry down.
    pub frames: Vec<String>,
}

/// Whose stack a [`KernelStack`] is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StackRole {
    /// The late thread's, as it left its CPU last before its delay began (where it slept,
    /// or was preempted).
    Late,
    /// The task's current where the late thread was woken, at its wakeup: for a timer, the
    /// code its interrupt stopped (as rtla's stack at a timer's threshold).
    Waker,
    /// The culprit's (the task of the main cause; else the task that held the CPU last
    /// before the late thread got it), as it gave the CPU back.
    RanInstead,
}

/// Explained outliers counted by their main cause (the first, largest one): a long run (`rtlab
/// watch`) keeps only the worst outliers themselves and counts all of them here.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct OutlierSummary {
    /// Outliers explained.
    pub explained: u64,
    /// Per kind of main cause.
    pub by_cause: std::collections::BTreeMap<CauseKind, CauseTally>,
    /// Outliers whose main cause is a task, by its name (at most [`OutlierSummary::TASKS`]
    /// names; the rest in `other_tasks`).
    pub by_task: std::collections::BTreeMap<String, u64>,
    /// Outliers whose main cause is a task not named in `by_task`.
    pub other_tasks: u64,
}

/// One kind of cause, in an [`OutlierSummary`].
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CauseTally {
    /// Outliers with this as their main cause.
    pub outliers: u64,
    /// The time causes of this kind took, over all outliers (ns).
    pub time_ns: u64,
    /// The longest outlier with this as its main cause (ns).
    pub max_ns: u64,
}

impl OutlierSummary {
    /// Task names counted one by one.
    pub const TASKS: usize = 64;

    /// Counts `o`.
    pub fn add(&mut self, o: &Outlier) {
        self.explained += 1;
        for c in &o.causes {
            self.by_cause.entry(c.kind).or_default().time_ns += c.duration_ns;
        }
        let Some(main) = o.causes.first() else {
            let t = self.by_cause.entry(CauseKind::Unexplained).or_default();
            t.outliers += 1;
            t.max_ns = t.max_ns.max(o.latency_ns);
            return;
        };
        let t = self.by_cause.entry(main.kind).or_default();
        t.outliers += 1;
        t.max_ns = t.max_ns.max(o.latency_ns);
        if let Some(task) = &main.task {
            let room = self.by_task.len() < Self::TASKS;
            match self.by_task.get_mut(task) {
                Some(n) => *n += 1,
                None if room => {
                    self.by_task.insert(task.clone(), 1);
                }
                None => self.other_tasks += 1,
            }
        }
    }
}

/// `verdict` of a result document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Verdict {
    /// The run was ended early by Ctrl-C (the series hold what was measured until then).
    pub interrupted: bool,
    /// Set when `--fail-above` was given: whether any latency exceeded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_above_exceeded: Option<bool>,
    /// Anything else a command concludes (e.g. the survey's readings).
    #[serde(flatten)]
    pub details: Map<String, Value>,
}

/// Formats ns since the Unix epoch as RFC 3339 UTC with second precision
/// (`2026-11-22T10:00:00Z`).
pub fn rfc3339_utc(epoch_ns: u64) -> String {
    let secs = epoch_ns / 1_000_000_000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Nanos;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400_000_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(
            rfc3339_utc(1_795_341_600_000_000_000),
            "2026-11-22T10:00:00Z"
        );
    }

    #[test]
    fn distribution_series_serialises_percentiles_and_buckets() {
        let mut h = LatencyHistogram::new();
        h.record(Nanos(100));
        h.record(Nanos(300));
        let s = Series::distribution("thread0", "wakeup_latency", &h)
            .unwrap()
            .with_config("cpu", 0);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["unit"], "ns");
        assert_eq!(v["count"], 2);
        assert_eq!(v["max"], 300.0);
        assert_eq!(v["histogram"]["encoding"], "hdr-v2-deflate-base64");
        assert_eq!(v["config"]["cpu"], 0);
        assert!(v.get("value").is_none());
        let back: Series = serde_json::from_value(v).unwrap();
        assert_eq!(back.decode_histogram().unwrap().unwrap().len(), 2);
    }

    #[test]
    fn value_series_has_no_distribution_fields() {
        let v = serde_json::to_value(Series::value("x", "lock_unlock", Unit::Ns, 9.1)).unwrap();
        assert_eq!(v["value"], 9.1);
        assert!(v.get("count").is_none() && v.get("config").is_none());
    }
}
