//! What `rtlab watch` reports at its end: the table, the notes on what it could not see, the
//! result document.

use super::*;

/// How the run went, for its report.
pub(super) struct Run {
    pub(super) started_realtime: u64,
    /// CLOCK_MONOTONIC at the start (the time base of the events).
    pub(super) started_ns: u64,
    pub(super) duration: Nanos,
    pub(super) why: &'static str,
    pub(super) warnings: Vec<String>,
}

/// The result document and the final text: the series, the outliers kept, the summary by
/// cause, why it ended.
pub(super) fn report(
    state: &Mutex<WatchState>,
    pid: i32,
    backend: rtlab_trace::Backend,
    run: Run,
) -> anyhow::Result<(rtlab_stats::result::ResultDoc, String)> {
    let s = state.lock().unwrap_or_else(|p| p.into_inner());
    let (series, table) = results(&s, pid, backend)?;
    let book = s.book();
    let mut doc = standalone_doc(
        "watch",
        run.started_realtime,
        run.duration,
        vec![],
        run.warnings,
        series,
    );
    doc.outliers = book.outliers();
    // Where the recorder looked: the watched threads' CPUs, as they changed.
    let (_, ever) = s.traced();
    let traced: Vec<usize> = rtlab_sys::affinity::online_cpus()
        .as_slice()
        .iter()
        .copied()
        .filter(|&c| ever.contains(c))
        .collect();
    doc.verdict.details.insert(
        "traced_cpus".into(),
        CpuList::from(traced).to_string().into(),
    );
    doc.verdict.details.insert(
        "outlier_summary".into(),
        serde_json::to_value(book.summary())?,
    );
    jvm_details(&s, run.started_ns, &mut doc.verdict.details);
    // rtlab's own threads: never a cause, their time counted as the observer's.
    doc.verdict.details.insert(
        "observer".into(),
        serde_json::json!({
            "threads": s.observer_threads().collect::<Vec<i64>>(),
            "ns": s.observer_ns(),
        }),
    );
    if s.wakeups_unseen() > 0 {
        doc.verdict
            .details
            .insert("wakeups_unseen".into(), s.wakeups_unseen().into());
    }
    let deadline_notes = s.deadline_notes();
    if !deadline_notes.is_empty() {
        doc.verdict
            .details
            .insert("deadline_notes".into(), deadline_notes.into());
    }
    let mut text = match table.is_empty() {
        false => table.render(),
        true => nothing_measured(&s),
    };
    text.push_str(&format!("ended: {}\n", run.why));
    let secs = (run.duration.get() as f64 / 1e9).max(1e-9);
    text.push_str(&observer_line(&s, book.summary(), secs));
    if s.ends_in_user_space() {
        text.push_str(
            "delays end where each wait returned to user space (the program's own view)\n",
        );
    }
    text.push_str(&lost_line(&s));
    for note in s.deadline_notes() {
        text.push_str(&note);
        text.push('\n');
    }
    let (notes, more) = s.jvm_notes();
    for note in notes {
        text.push_str(&note);
        text.push('\n');
    }
    if more > 0 {
        text.push_str(&format!("JVM: {more} more notes like these not shown\n"));
    }
    text.push_str(&summary_lines(book.summary(), book.worst()));
    Ok((doc, text))
}

/// A watched JVM's safepoints one by one (the latest thousand), as HotSpot's probes (or its
/// log) told them: -Xlog:safepoint's figures, from outside; with --jvm-log, the JVMs' own
/// logs beside the probes, stop by stop.
pub(super) fn jvm_details(
    s: &WatchState,
    started_ns: u64,
    details: &mut serde_json::Map<String, serde_json::Value>,
) {
    let at = |ns: u64| ns.saturating_sub(started_ns);
    let (stops, seen) = s.jvm_stops();
    let stops: Vec<serde_json::Value> = stops
        .map(|st| {
            serde_json::json!({
                "process": st.process,
                "operation": st.operation.as_deref(),
                "cause": st.cause.as_deref(),
                "at_ns": at(st.begin_ns),
                "reaching_ns": st.reached_ns.map(|r| r.saturating_sub(st.begin_ns)),
                "total_ns": st.end_ns.saturating_sub(st.begin_ns),
                "log_total_ns": s.jvm_log_total(st.process, st.begin_ns),
            })
        })
        .collect();
    if seen > 0 {
        let latest = serde_json::json!({ "count": seen, "latest": stops });
        details.insert("jvm_safepoints".into(), latest);
    }
    if !s.jvm_log_asked() {
        return;
    }
    let ((compared, differing), flagged) = s.jvm_witnesses();
    let flagged: Vec<serde_json::Value> = (flagged.iter())
        .map(|p| {
            serde_json::json!({
                "process": p.process,
                "operation": p.operation.as_deref(),
                "at_ns": at(p.begin_ns),
                "probes_total_ns": p.probes_ns,
                "log_total_ns": p.log_ns,
            })
        })
        .collect();
    details.insert(
        "jvm_witnesses".into(),
        serde_json::json!({
            "compared": compared,
            "differing": differing,
            "differ_above": {"share": rtlab_watch::DIFFER_SHARE, "ns": rtlab_watch::DIFFER_MIN_NS},
            "differing_stops": flagged,
        }),
    );
}

/// What watching cost: rtlab's own time on the watched CPUs, and the delays it had a part
/// in (counted as the observer's, never blamed on the program or another task).
pub(super) fn observer_line(
    s: &WatchState,
    summary: &rtlab_stats::result::OutlierSummary,
    secs: f64,
) -> String {
    let ran = format!(
        "observer: rtlab's own threads ran {} on the watched CPUs ({} a second)",
        Nanos(s.observer_ns()),
        Nanos((s.observer_ns() as f64 / secs) as u64)
    );
    let ours = summary
        .by_cause
        .get(&rtlab_stats::result::CauseKind::Observer);
    match ours.filter(|t| t.outliers > 0) {
        None => format!("{ran}; no delay explained was theirs\n"),
        Some(t) => format!(
            "{ran}\n  they were the main cause of {} delay(s) explained (max {}): the cost of watching\n",
            t.outliers,
            Nanos(t.max_ns)
        ),
    }
}

/// Trace events lost, in the final text: never silent.
pub(super) fn lost_line(s: &WatchState) -> String {
    let (watched, others) = s
        .lost_by_cpu()
        .values()
        .fold((0, 0), |(w, o), l| (w + l[0], o + l[1]));
    let unmeasured: u64 = s
        .series()
        .iter()
        .filter(|w| w.tid.is_none())
        .map(|w| w.unmeasured)
        .sum();
    let cpus = |i: usize| {
        let list: Vec<usize> = s
            .lost_by_cpu()
            .iter()
            .filter(|(_, l)| l[i] > 0)
            .map(|(&c, _)| c as usize)
            .collect();
        CpuList::from(list).to_string()
    };
    let mut out = String::new();
    if watched == 0 && others == 0 {
        out.push_str("events lost: none\n");
    }
    let unseen = s.wakeups_unseen();
    if unseen > 0 {
        out.push_str(&format!(
            "wakeups not in the trace: {unseen} on CPU {}, counted as unmeasured\n  \
             (a watched thread ran again with no wakeup or no switch onto its CPU seen, and no \
             event counted lost)\n",
            CpuList::from(s.wakeups_unseen_on())
        ));
    }
    if watched > 0 {
        out.push_str(&format!(
            "events lost: {watched} of the watched threads' (CPU {}): the delays within them are missing from the figures, and {unmeasured} delay(s) a loss cut short are counted as unmeasured\n",
            cpus(0)
        ));
    }
    if others > 0 {
        out.push_str(&format!(
            "events lost: {others} of other tasks' (CPU {}): {}explanations near the losses are incomplete\n",
            cpus(1),
            if watched == 0 {
                "the watched threads' figures are complete (their events have rings of their own); "
            } else {
                ""
            }
        ));
    }
    out
}

/// What the run could not watch or measure, as warnings.
pub(super) fn shortfalls(
    s: &WatchState,
    pid: i32,
    findings: &rtlab_trace::Findings,
) -> Vec<String> {
    let (refused, abandoned) = s.shortfalls();
    let lost_events = findings.lost_events;
    let mut warnings = Vec::new();
    if findings.backend == rtlab_trace::Backend::Bpf {
        let (locks, others): (Vec<_>, Vec<_>) = findings
            .missing_events
            .iter()
            .partition(|m| matches!(m, rtlab_trace::Missing::LockWaits(_)));
        if !others.is_empty() {
            let names: Vec<String> = others.iter().map(|m| m.to_string()).collect();
            warnings.push(format!("not traced on this kernel: {}", names.join(", ")));
        }
        if let Some(why) = locks.first() {
            warnings.push(format!(
                "no lock series: {why}{}",
                if s.spec().locks == rtlab_trace::LockWaits::Any {
                    ""
                } else {
                    "; --locks records them on the system calls instead, at a cost to every system call"
                }
            ));
        }
    }
    if refused > 0 {
        warnings.push(format!(
            "{refused} thread(s) or timer/lock series not watched: at most {} series",
            rtlab_watch::MAX_SERIES
        ));
    }
    if lost_events > 0 || abandoned > 0 {
        warnings.push(format!(
            "{lost_events} trace events lost; {abandoned} delay(s) left unmeasured across the losses"
        ));
    }
    if s.series().iter().all(|w| w.total.is_empty()) {
        warnings.push(format!(
            "no watched thread of process {pid} was woken while watched"
        ));
    }
    warnings
}

/// Each series of the table (a name's, and its threads' when it has several) as a log2
/// histogram.
pub(super) fn histograms(s: &WatchState) -> String {
    let mut out = String::new();
    for w in table_order(s.series()) {
        out.push_str(&format!("\n{}:\n", rtlab_report::printable(&w.name)));
        out.push_str(&rtlab_report::table::log2_histogram(&w.total));
    }
    out
}

/// The names and cgroups of the processes a series is of: its thread's, or its threads'.
pub(super) fn owners(s: &WatchState, w: &rtlab_watch::WatchSeries) -> (Vec<String>, Vec<String>) {
    let procs: std::collections::BTreeSet<u32> = match w.process {
        Some(p) => [p].into(),
        // Kept on the name's series: its threads' own series may have given way since.
        None => w.owners.iter().copied().collect(),
    };
    let of = |f: fn(&(String, String)) -> &String| -> Vec<String> {
        let set: std::collections::BTreeSet<String> = procs
            .iter()
            .filter_map(|&p| s.process(p).map(|x| f(x).clone()))
            .collect();
        set.into_iter().collect()
    };
    (of(|p| &p.0), of(|p| &p.1))
}

/// One label value for a list: its only member, `(several)`, or empty.
pub(super) fn one_label(v: Vec<String>) -> String {
    match v.len() {
        0 => String::new(),
        1 => v.into_iter().next().unwrap_or_default(),
        _ => "(several)".into(),
    }
}

/// The table's rows: the series of each name and class, real-time ones first, the worst
/// (longest delay) first, each followed by its threads' own series when it sums more than
/// one (a name with one thread is one row).
pub(super) fn table_order(series: &[rtlab_watch::WatchSeries]) -> Vec<&rtlab_watch::WatchSeries> {
    let worst_first = |v: &mut Vec<&rtlab_watch::WatchSeries>| {
        v.sort_by_key(|w| (std::cmp::Reverse(w.rt), std::cmp::Reverse(w.total.max())));
    };
    let mut names: Vec<_> = series
        .iter()
        .filter(|w| w.tid.is_none() && !w.total.is_empty())
        .collect();
    worst_first(&mut names);
    let mut rows = Vec::new();
    for n in names {
        rows.push(n);
        if n.members.len() > 1 {
            let mut threads: Vec<_> = n
                .members
                .iter()
                .filter_map(|&i| series.get(i as usize))
                .filter(|w| !w.total.is_empty())
                .collect();
            worst_first(&mut threads);
            rows.extend(threads);
        }
    }
    rows
}

/// Where a timer series' deadlines came from, the most frequent first (two at most, and how
/// many others): `timerfd`, `java-park, java-period`.
pub(super) fn deadline_sources(w: &rtlab_watch::WatchSeries) -> String {
    let mut by_count: Vec<_> = w.deadlines.iter().collect();
    by_count.sort_by_key(|(source, n)| (std::cmp::Reverse(**n), **source));
    let mut names: Vec<&str> = by_count.iter().take(2).map(|(s, _)| s.name()).collect();
    let more = format!("+{}", by_count.len().saturating_sub(2));
    if by_count.len() > 2 {
        names.push(&more);
    }
    names.join(", ")
}

/// The result's series (each with samples, and `watch/threads`) and the table.
pub(super) fn results(
    s: &WatchState,
    pid: i32,
    backend: rtlab_trace::Backend,
) -> anyhow::Result<(Vec<Series>, Table)> {
    let mut series = Vec::new();
    // A column for the delays not measured, when any was not.
    let unmeasured = s.series().iter().any(|w| w.unmeasured > 0);
    let mut columns = vec!["series", "n", "p50", "p99", "p99.9", "max"];
    if unmeasured {
        columns.push("unmeasured");
    }
    // Where the timer delays' deadlines came from, when there are any.
    let deadlines = s.series().iter().any(|w| !w.deadlines.is_empty());
    if deadlines {
        columns.push("deadline");
    }
    let mut table = Table::new(&columns);
    for w in table_order(s.series()) {
        let sum = w.total.summary();
        let mut row = vec![
            w.name.clone(),
            sum.count.to_string(),
            Nanos(sum.p50).to_string(),
            Nanos(sum.p99).to_string(),
            Nanos(sum.p999).to_string(),
            Nanos(sum.max).to_string(),
        ];
        if unmeasured {
            row.push(w.unmeasured.to_string());
        }
        if deadlines {
            row.push(deadline_sources(w));
        }
        table.row(row);
    }
    for w in s.series().iter().filter(|w| !w.total.is_empty()) {
        let metric = match w.kind {
            DelayKind::Wakeup => "wakeup_latency",
            DelayKind::Timer => "timer_latency",
            DelayKind::Lock => "lock_wait",
            DelayKind::Safepoint => "safepoint_duration",
        };
        let mut out = Series::distribution(w.name.clone(), metric, &w.total)?
            .with_config("pid", pid)
            .with_config("kind", w.kind.name())
            .with_config("class", class_of(w));
        let (processes, cgroups) = owners(s, w);
        out = out
            .with_config("process", processes)
            .with_config("cgroup", cgroups);
        if let Some(p) = w.process {
            out = out.with_config("process_pid", p);
        }
        if !w.deadlines.is_empty() {
            let sources: serde_json::Map<String, serde_json::Value> = (w.deadlines.iter())
                .map(|(source, n)| (source.name().to_string(), (*n).into()))
                .collect();
            out = out.with_config("deadlines", serde_json::Value::Object(sources));
        }
        if let Some(t) = w.timeline.timeline() {
            out = t.into_config_of(out);
        }
        out.unmeasured = Some(w.unmeasured);
        out.tags.insert("source".into(), backend.name().into());
        series.push(out);
    }
    series.push(
        Series::value(
            "watch/threads",
            "threads_watched",
            rtlab_stats::result::Unit::Count,
            s.most_threads() as f64,
        )
        .with_config("pid", pid),
    );
    // What watching cost the watched CPUs: rtlab's own threads' time there (never a cause).
    series.push(
        Series::value(
            "watch/observer",
            "observer_time",
            rtlab_stats::result::Unit::Ns,
            s.observer_ns() as f64,
        )
        .with_config("pid", pid)
        .with_config("ends_in_user_space", s.ends_in_user_space()),
    );
    Ok((series, table))
}
