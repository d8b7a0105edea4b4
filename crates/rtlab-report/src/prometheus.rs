//! The Prometheus text exposition format (version 0.0.4) of a watch: what `rtlab watch
//! --metrics` serves at `/metrics`.

use rtlab_stats::result::OutlierSummary;
use rtlab_stats::LatencyHistogram;
use std::fmt::Write;

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Histogram bucket bounds (ns): 1 us to 100 ms, 1-2.5-5 per decade.
pub const BUCKETS_NS: [u64; 16] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
];

/// One thread name's delays of one kind.
#[derive(Debug, Clone)]
pub struct DelayMetric {
    /// The thread name (summed over the threads of that name and class).
    pub thread: String,
    /// `realtime` (SCHED_FIFO/RR) or `time-sharing`.
    pub class: &'static str,
    /// The name of the threads' process (`(several)` for more than one), and its cgroup.
    pub process: String,
    pub cgroup: String,
    /// `wakeup` or `timer`.
    pub kind: &'static str,
    /// Since the start.
    pub total: LatencyHistogram,
    /// The longest in the last complete interval (ns).
    pub last_interval_max_ns: u64,
    /// Delays that began but could not be measured (the thread's own events were lost).
    pub unmeasured: u64,
}

impl DelayMetric {
    /// Its labels: bounded (names and classes, never thread ids), with a Kubernetes pod's
    /// UID and its container's ID where the cgroup is one's (one per cgroup, so no more
    /// series).
    fn labels(&self) -> String {
        format!(
            "process=\"{}\",cgroup=\"{}\",{}thread=\"{}\",class=\"{}\",kind=\"{}\"",
            label(&self.process),
            label(&self.cgroup),
            pod_labels(&self.cgroup),
            label(&self.thread),
            self.class,
            self.kind
        )
    }
}

/// `pod_uid="..",container_id="..",` for a cgroup in a Kubernetes pod (the container's only
/// when the path names one), else nothing. The UID joins kube-state-metrics'
/// `kube_pod_info{uid}` for the pod's name and namespace.
fn pod_labels(cgroup: &str) -> String {
    let Some(pod) = rtlab_sys::cgroup::kubernetes_container(cgroup) else {
        return String::new();
    };
    let container = pod
        .container_id
        .map(|id| format!("container_id=\"{id}\","))
        .unwrap_or_default();
    format!("pod_uid=\"{}\",{container}", pod.pod_uid)
}

/// Trace events lost on one CPU.
#[derive(Debug, Clone, Copy, Default)]
pub struct LostOnCpu {
    pub cpu: u16,
    /// Of the watched threads (their delays may be unmeasured).
    pub watched: u64,
    /// Of other tasks only (explanations near them are incomplete).
    pub others: u64,
}

/// The losses of every CPU in `cpus` (zero where none was lost) and of any other CPU in
/// `lost` (`[watched, others]`): a counter that exists from the first scrape, so that
/// Prometheus's `increase()` sees the first loss (a series born at 5 has no increase).
pub fn lost_on_cpus(
    cpus: &[usize],
    lost: &std::collections::BTreeMap<u16, [u64; 2]>,
) -> Vec<LostOnCpu> {
    let mut all: std::collections::BTreeMap<u16, [u64; 2]> = cpus
        .iter()
        .filter_map(|&c| u16::try_from(c).ok())
        .map(|c| (c, [0, 0]))
        .collect();
    all.extend(lost);
    all.into_iter()
        .map(|(cpu, [watched, others])| LostOnCpu {
            cpu,
            watched,
            others,
        })
        .collect()
}

/// What a scrape shows.
#[derive(Debug, Clone, Default)]
pub struct WatchMetrics {
    /// Per thread name and kind.
    pub delays: Vec<DelayMetric>,
    /// Explained outliers by main cause and culprit.
    pub outliers: OutlierSummary,
    /// Trace events the kernel or the recorder lost, by CPU.
    pub events_lost: Vec<LostOnCpu>,
    /// Delays not measured because events around them were lost.
    pub delays_abandoned: u64,
    /// Threads (one per kind of delay) left unwatched at the series limit.
    pub threads_refused: u64,
    /// Threads watched now.
    pub threads: usize,
    /// The watched process.
    pub pid: i32,
    /// rtlab's version.
    pub version: String,
}

/// A label value with `\`, `"` and newlines escaped.
fn label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn seconds(ns: u128) -> String {
    format!("{}", ns as f64 / 1e9)
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Renders `m` in the text format.
pub fn render(m: &WatchMetrics) -> String {
    let mut out = String::new();
    render_delays(&mut out, m);
    render_outliers(&mut out, m);
    render_losses(&mut out, m);
    header(&mut out, "rtlab_build_info", "gauge", "rtlab's version.");
    let _ = writeln!(
        out,
        "rtlab_build_info{{version=\"{}\"}} 1",
        label(&m.version)
    );
    out
}

/// The delays' histograms and their last interval's maxima.
fn render_delays(out: &mut String, m: &WatchMetrics) {
    header(
        out,
        "rtlab_watch_delay_seconds",
        "histogram",
        "Delays of the watched threads since the start, per thread name and kind (wakeup: runnable to running; timer: sleep timer's requested expiry to running; lock: blocked waiting for a PI futex).",
    );
    for d in &m.delays {
        let labels = d.labels();
        let counts = d.total.cumulative_counts(&BUCKETS_NS);
        for (bound, count) in BUCKETS_NS.iter().zip(&counts) {
            let _ = writeln!(
                out,
                "rtlab_watch_delay_seconds_bucket{{{labels},le=\"{}\"}} {count}",
                seconds(*bound as u128)
            );
        }
        let n = d.total.len();
        let _ = writeln!(
            out,
            "rtlab_watch_delay_seconds_bucket{{{labels},le=\"+Inf\"}} {n}\n\
             rtlab_watch_delay_seconds_sum{{{labels}}} {}\n\
             rtlab_watch_delay_seconds_count{{{labels}}} {n}",
            seconds(d.total.sum_ns())
        );
    }
    header(
        out,
        "rtlab_watch_delay_interval_max_seconds",
        "gauge",
        "The longest delay in the last complete interval (--interval-log), per thread name and kind.",
    );
    for d in &m.delays {
        let _ = writeln!(
            out,
            "rtlab_watch_delay_interval_max_seconds{{{}}} {}",
            d.labels(),
            seconds(d.last_interval_max_ns as u128)
        );
    }
}

/// Explained outliers by cause and by culprit.
fn render_outliers(out: &mut String, m: &WatchMetrics) {
    header(
        out,
        "rtlab_watch_outliers_total",
        "counter",
        "Explained outliers by the kind of their main cause.",
    );
    for (kind, t) in &m.outliers.by_cause {
        if t.outliers > 0 {
            let _ = writeln!(
                out,
                "rtlab_watch_outliers_total{{cause=\"{}\"}} {}",
                kind.as_str(),
                t.outliers
            );
        }
    }
    header(
        out,
        "rtlab_watch_outlier_culprits_total",
        "counter",
        "Explained outliers whose main cause is a task, by its name (\"(other)\" past 64 names).",
    );
    let other = (m.outliers.other_tasks > 0).then_some(("(other)", m.outliers.other_tasks));
    for (task, n) in m
        .outliers
        .by_task
        .iter()
        .map(|(t, n)| (t.as_str(), *n))
        .chain(other)
    {
        let _ = writeln!(
            out,
            "rtlab_watch_outlier_culprits_total{{task=\"{}\"}} {n}",
            label(task)
        );
    }
}

/// What the watch could not measure: unmeasured delays, lost events, refused threads.
fn render_losses(out: &mut String, m: &WatchMetrics) {
    header(
        out,
        "rtlab_watch_delays_unmeasured_total",
        "counter",
        "Delays that began but could not be measured (the thread's own trace events were lost), per thread name and kind.",
    );
    for d in &m.delays {
        let _ = writeln!(
            out,
            "rtlab_watch_delays_unmeasured_total{{{}}} {}",
            d.labels(),
            d.unmeasured
        );
    }
    header(
        out,
        "rtlab_watch_events_lost_total",
        "counter",
        "Trace events lost, by CPU: of the watched threads (of=\"watched\": their delays may go unmeasured) and of other tasks only (of=\"others\": explanations near them are incomplete).",
    );
    for l in &m.events_lost {
        for (of, n) in [("watched", l.watched), ("others", l.others)] {
            let _ = writeln!(
                out,
                "rtlab_watch_events_lost_total{{pid=\"{}\",cpu=\"{}\",of=\"{of}\"}} {n}",
                m.pid, l.cpu
            );
        }
    }
    for (name, kind, help, value) in [
        (
            "rtlab_watch_delays_abandoned_total",
            "counter",
            "Delays left unmeasured because events around them were lost.",
            m.delays_abandoned,
        ),
        (
            "rtlab_watch_threads_unwatched_total",
            "counter",
            "Threads left unwatched (counted once per kind of delay) because the watch holds as many series as it may (512): a restart watches them again.",
            m.threads_refused,
        ),
        (
            "rtlab_watch_threads",
            "gauge",
            "Threads of the process watched now.",
            m.threads as u64,
        ),
    ] {
        header(out, name, kind, help);
        let _ = writeln!(out, "{name}{{pid=\"{}\"}} {value}", m.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_stats::result::{Cause, CauseKind, Outlier};
    use rtlab_stats::Nanos;

    #[test]
    fn renders_cumulative_buckets_escaped_labels_and_counters() {
        let mut total = LatencyHistogram::compact();
        for ns in [800, 3_000, 3_000, 2_000_000] {
            total.record(Nanos(ns));
        }
        let mut outliers = OutlierSummary::default();
        outliers.add(&Outlier {
            series: "a/1/timer".into(),
            at_ns: 0,
            latency_ns: 2_000_000,
            cpu: None,
            until_running_ns: None,
            causes: vec![Cause {
                kind: CauseKind::Preemption,
                duration_ns: 1_900_000,
                task: Some("rtlab-hog".into()),
                pid: Some(5),
                prio: Some(0),
                detail: None,
                reason: None,
                stall_ns: None,
            }],
            stacks: Vec::new(),
        });
        let text = render(&WatchMetrics {
            delays: vec![DelayMetric {
                thread: "rt \"loop\"\\".into(),
                class: "realtime",
                process: "app".into(),
                cgroup: "/pod".into(),
                kind: "timer",
                total,
                last_interval_max_ns: 2_000_000,
                unmeasured: 1,
            }],
            outliers,
            events_lost: vec![LostOnCpu {
                cpu: 1,
                watched: 0,
                others: 3,
            }],
            delays_abandoned: 1,
            threads_refused: 3,
            threads: 2,
            pid: 42,
            version: "0.1.0".into(),
        });
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        let labels =
            r#"process="app",cgroup="/pod",thread="rt \"loop\"\\",class="realtime",kind="timer""#;
        has(&format!(
            "rtlab_watch_delay_seconds_bucket{{{labels},le=\"0.000001\"}} 1"
        ));
        has(&format!(
            "rtlab_watch_delay_seconds_bucket{{{labels},le=\"0.0000025\"}} 1"
        ));
        has(&format!(
            "rtlab_watch_delay_seconds_bucket{{{labels},le=\"0.000005\"}} 3"
        ));
        has(&format!(
            "rtlab_watch_delay_seconds_bucket{{{labels},le=\"0.0025\"}} 4"
        ));
        has(&format!(
            "rtlab_watch_delay_seconds_bucket{{{labels},le=\"+Inf\"}} 4"
        ));
        has(&format!("rtlab_watch_delay_seconds_count{{{labels}}} 4"));
        has(&format!(
            "rtlab_watch_delay_seconds_sum{{{labels}}} 0.0020068"
        ));
        has(&format!(
            "rtlab_watch_delay_interval_max_seconds{{{labels}}} 0.002"
        ));
        has("rtlab_watch_outliers_total{cause=\"preemption\"} 1");
        has("rtlab_watch_outlier_culprits_total{task=\"rtlab-hog\"} 1");
        has("rtlab_watch_events_lost_total{pid=\"42\",cpu=\"1\",of=\"others\"} 3");
        has("rtlab_watch_events_lost_total{pid=\"42\",cpu=\"1\",of=\"watched\"} 0");
        has(&format!(
            "rtlab_watch_delays_unmeasured_total{{{labels}}} 1"
        ));
        has("rtlab_watch_threads{pid=\"42\"} 2");
        has("rtlab_watch_threads_unwatched_total{pid=\"42\"} 3");
        has("rtlab_build_info{version=\"0.1.0\"} 1");
        // Every sample line is `name{labels} value`, every metric declared once.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = l.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{l}");
        }
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(types, 10);
    }

    #[test]
    fn every_cpu_has_a_loss_counter_from_the_start() {
        let lost = [(1u16, [0u64, 3u64]), (7, [2, 0])].into_iter().collect();
        let got: Vec<(u16, u64, u64)> = lost_on_cpus(&[0, 1], &lost)
            .iter()
            .map(|l| (l.cpu, l.watched, l.others))
            .collect();
        assert_eq!(got, [(0, 0, 0), (1, 0, 3), (7, 2, 0)]);
    }

    #[test]
    fn a_pods_series_carry_its_uid_and_container_and_others_do_not() {
        let metric = |cgroup: &str| DelayMetric {
            thread: "rt".into(),
            class: "realtime",
            process: "app".into(),
            cgroup: cgroup.into(),
            kind: "wakeup",
            total: LatencyHistogram::compact(),
            last_interval_max_ns: 0,
            unmeasured: 0,
        };
        let pod = metric("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3c5d8f2e_1b7a_4a4e_9c1d_2f6b8e0a7c11.slice/cri-containerd-9f8e.scope");
        assert_eq!(
            pod.labels(),
            format!(
                "process=\"app\",cgroup=\"{}\",pod_uid=\"3c5d8f2e-1b7a-4a4e-9c1d-2f6b8e0a7c11\",container_id=\"9f8e\",thread=\"rt\",class=\"realtime\",kind=\"wakeup\"",
                pod.cgroup
            )
        );
        assert_eq!(
            metric("/kubepods/besteffort/pod3c5d8f2e-1b7a-4a4e-9c1d-2f6b8e0a7c11").labels(),
            "process=\"app\",cgroup=\"/kubepods/besteffort/pod3c5d8f2e-1b7a-4a4e-9c1d-2f6b8e0a7c11\",pod_uid=\"3c5d8f2e-1b7a-4a4e-9c1d-2f6b8e0a7c11\",thread=\"rt\",class=\"realtime\",kind=\"wakeup\""
        );
        for cgroup in ["/system.slice/app.service", "(several)", ""] {
            assert!(!metric(cgroup).labels().contains("pod_uid"), "{cgroup}");
        }
    }
}
