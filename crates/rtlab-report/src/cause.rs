//! Every sentence about a cause, made from the result document: an outlier's one line (the
//! terminal), its causes (the HTML report) and the causes that took most of a set of outliers'
//! time (the survey's and noise's readings, and the survey's `top_causes` in the JSON).
//!
//! A cause's `detail` is the exception: the explainer writes it when it finds the cause,
//! from what it saw and the document does not keep (rtlab-trace's `Reason`); here it is
//! quoted where a cause has nothing better to say. Everything here decides by a cause's
//! mechanism (rtlab-stats' `CauseKey`, from its kind, reason code and priority), never by its
//! text; a cause's name is its line's words without the time, pid or priority, so the same
//! cause reads the same in the terminal, the HTML report, the survey and the JSON.

use rtlab_stats::cause::{CauseKey, Mechanism};
use rtlab_stats::details::{CauseShare, RowWithCauses, SurveyRow};
use rtlab_stats::result::{Cause, CauseKind, Outlier, ReasonCode};
use rtlab_stats::Nanos;

/// What an outlier's figure measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// How late the thread was ("late by").
    Lateness,
    /// How long the thread waited (a watched thread's lock waits: "waited").
    Wait,
}

/// One readable line: "thread0 late by 3.1 ms at 12.4 s: 2.9 ms preempted by rtlab-hog (pid 42,
/// RT 99); 0.2 ms IRQ 11 virtio0".
pub fn describe(outlier: &Outlier, measure: Measure) -> String {
    line(
        &outlier.series,
        measure,
        outlier.latency_ns,
        outlier.at_ns,
        &outlier.causes,
    )
}

/// [`describe`] from the outlier's parts.
pub fn line(
    series: &str,
    measure: Measure,
    latency_ns: u64,
    at_ns: u64,
    causes: &[Cause],
) -> String {
    let what = match measure {
        Measure::Lateness => "late by",
        Measure::Wait => "waited",
    };
    format!(
        "{series} {what} {} at {:.1} s: {}",
        Nanos(latency_ns),
        at_ns as f64 / 1e9,
        causes_text(latency_ns, causes)
    )
}

/// The causes of an outlier `latency_ns` long that matter: 1 % of it or 10 us, at most four.
fn shown(latency_ns: u64, causes: &[Cause]) -> impl Iterator<Item = &Cause> {
    causes
        .iter()
        .filter(move |c| c.duration_ns * 100 >= latency_ns || c.duration_ns >= 10_000)
        .take(4)
}

/// [`shown`]'s causes, "; " between them: "2.9 ms preempted by rtlab-hog (pid 42, RT 99); 0.2
/// ms IRQ 11 virtio0".
pub fn causes_text(latency_ns: u64, causes: &[Cause]) -> String {
    let parts: Vec<String> = shown(latency_ns, causes).map(phrase).collect();
    if parts.is_empty() {
        "no cause found".into()
    } else {
        parts.join("; ")
    }
}

/// An outlier for a terminal: its figure on the first line, then each cause that matters on
/// a line of its own, every line at most `width` columns (a long one broken at spaces, its
/// rest indented under it), `indent` before each.
pub fn describe_lines(
    outlier: &Outlier,
    measure: Measure,
    indent: usize,
    width: usize,
) -> Vec<String> {
    let what = match measure {
        Measure::Lateness => "late by",
        Measure::Wait => "waited",
    };
    let head = format!(
        "{}{} {what} {} at {:.1} s:",
        " ".repeat(indent),
        outlier.series,
        Nanos(outlier.latency_ns),
        outlier.at_ns as f64 / 1e9
    );
    let causes: Vec<String> = shown(outlier.latency_ns, &outlier.causes)
        .map(phrase)
        .collect();
    if causes.is_empty() {
        return vec![format!("{head} no cause found")];
    }
    let mut lines = vec![head];
    for c in causes {
        lines.extend(wrapped(&c, indent + 2, width));
    }
    lines
}

/// `text` in lines of at most `width` columns from `indent`, broken at spaces (a word longer
/// than a line stays whole), the rest of it two further in.
pub fn wrapped(text: &str, indent: usize, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = " ".repeat(indent);
    let mut empty = true;
    for word in text.split(' ') {
        if !empty && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut line, " ".repeat(indent + 2)));
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    lines.push(line);
    lines
}

/// "RT 99", or "time-sharing" for a task without a real-time priority.
fn priority(c: &Cause) -> String {
    match c.prio {
        Some(p) if p > 0 => format!("RT {p}"),
        _ => "time-sharing".into(),
    }
}

/// One cause with its time: "2.9 ms preempted by rtlab-hog (pid 42, RT 99)".
pub fn phrase(c: &Cause) -> String {
    let key = CauseKey::of(c);
    let who = c
        .task
        .as_deref()
        .map(|task| format!("{task} (pid {}, {})", c.pid.unwrap_or(-1), priority(c)))
        .unwrap_or_default();
    // What this outlier alone adds to the cause's name.
    let own = match key.mechanism {
        Mechanism::Blocked => match c.reason {
            Some(ReasonCode::HolderRan) => ", running".into(),
            Some(ReasonCode::WaitingForHolder) => ", elsewhere or asleep".into(),
            Some(ReasonCode::PeerAsleep) => ", itself asleep".into(),
            _ => String::new(),
        },
        // A lower class never preempts: the scheduler gave it the time.
        Mechanism::FairServer | Mechanism::Throttled => format!(": {who} ran meanwhile"),
        // (After a colon, not in parentheses: a detail has its own.)
        Mechanism::Other(_) => c
            .detail
            .as_deref()
            .map(|x| format!(": {x}"))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let detail = c.detail.as_deref();
    // A stall inside is what took the time: said first, what it was inside after it.
    let stall = c
        .stall_ns
        .map(|s| {
            format!(
                "stalled {} with no event (interrupts off, or the vCPU not running) in ",
                Nanos(s)
            )
        })
        .unwrap_or_default();
    format!(
        "{} {stall}{}{own}",
        Nanos(c.duration_ns),
        words(key.mechanism, &who, detail)
    )
}

/// A cause's name without its time, pid or priority, so that the same cause in several
/// outliers counts as one, worded as an outlier's line says it: "preempted by rtlab-hog",
/// "timer interrupt late while make ran", "throttled (the fair server)", "local_timer".
pub fn name(key: &CauseKey) -> String {
    words(
        key.mechanism,
        key.task.as_deref().unwrap_or_default(),
        key.detail.as_deref(),
    )
}

/// The words for a mechanism, `who` the task as the line says it (with its pid and priority
/// in an outlier's line, its name alone in a cause's name).
fn words(mechanism: Mechanism, who: &str, detail: Option<&str>) -> String {
    match mechanism {
        Mechanism::Blocked => format!("blocked on {who}"),
        // Nor in its kernel code: the kernel did not let it be preempted.
        Mechanism::NonPreemptible => {
            format!("{who} held the CPU in non-preemptible kernel code")
        }
        Mechanism::FairServer => "throttled (the fair server)".into(),
        Mechanism::Throttled => "throttled (RT bandwidth)".into(),
        Mechanism::ThrottledIdle => {
            "throttled (the CPU idled while the thread could run)".into()
        }
        // A lower-priority task preempts nothing: the switch was on its way.
        Mechanism::TimerTail => {
            format!("rest of the timer interrupt, then {who} until the switch")
        }
        // Not woken yet: nothing was preempted, the timer interrupt was late.
        Mechanism::TimerLate => format!("timer interrupt late while {who} ran"),
        Mechanism::PriorityInversion => format!(
            "preempted by {who} while the lock holder waited: priority inversion"
        ),
        Mechanism::NetStackInversion => format!(
            "preempted by {who} while the packet thread with the reply waited: priority inversion in the network stack"
        ),
        Mechanism::Preempted => format!("preempted by {who}"),
        Mechanism::TimerSlack => "timer slack".into(),
        Mechanism::Observer => "observer (rtlab itself)".into(),
        Mechanism::Irq => {
            let name = detail.unwrap_or("IRQ");
            format!("{} ({name})", interrupt_words(name))
        }
        Mechanism::Softirq => {
            let name = detail.unwrap_or("?");
            format!("{} (softirq {name})", softirq_words(name))
        }
        Mechanism::Other(kind) => format!("{} ({})", kind_words(kind), kind.as_str()),
    }
}

/// A kind of cause for a count of them: its plain words, then its name (`another task on the
/// CPU (preemption)`).
pub fn kind_named(kind: CauseKind) -> String {
    format!("{} ({})", kind_words(kind), kind.as_str())
}

/// What a kind of cause is, in plain words (the kernel's name follows in parentheses).
fn kind_words(kind: CauseKind) -> &'static str {
    match kind {
        CauseKind::Irq => "an interrupt handler",
        CauseKind::Softirq => "deferred interrupt work",
        CauseKind::Nmi => "a non-maskable interrupt",
        CauseKind::Preemption => "another task on the CPU",
        CauseKind::Blocking => "asleep, waiting for something else",
        CauseKind::IdleExit => "the CPU leaving a power-saving idle state",
        CauseKind::Migration => "a move to another CPU",
        CauseKind::HypervisorGap => "the host held the vCPU or its interrupt back",
        CauseKind::PageFault => "a page fault",
        CauseKind::Syscall => "the thread's own kernel work",
        CauseKind::Observer => "rtlab itself",
        CauseKind::Safepoint => "the JVM stopped its threads",
        CauseKind::Unexplained => "not explained",
    }
}

/// An interrupt vector's or handler's name in plain words: the vectors the kernel names,
/// else a device's handler (its name is the device's).
fn interrupt_words(name: &str) -> &'static str {
    let vector = name.split(' ').next().unwrap_or(name);
    match vector {
        "local_timer" => "the timer interrupt",
        "call_function" | "call_function_single" => "another CPU asked this one to run a function",
        "reschedule" => "another CPU asked this one to reschedule",
        "irq_work" => "deferred interrupt work",
        "x86_platform_ipi" => "a platform interrupt",
        "thermal_apic" | "threshold_apic" => "a thermal or machine-check interrupt",
        "error_apic" | "spurious_apic" => "a spurious or error interrupt",
        _ => "a device's interrupt handler",
    }
}

/// A softirq's name in plain words.
fn softirq_words(name: &str) -> &'static str {
    match name.split(' ').next().unwrap_or(name) {
        "HI" | "TASKLET" => "deferred driver work",
        "TIMER" => "expired kernel timers' callbacks",
        "HRTIMER" => "high-resolution timer callbacks",
        "NET_RX" => "received network packets processed",
        "NET_TX" => "sent network packets completed",
        "BLOCK" | "IRQ_POLL" => "finished disk I/O processed",
        "SCHED" => "the scheduler balancing load between CPUs",
        "RCU" => "memory freed once no reader could still see it",
        _ => "deferred interrupt work",
    }
}

/// The causes that took most of a set of outliers' time, named.
pub fn named(shares: &[CauseShare<CauseKey>]) -> Vec<CauseShare> {
    shares
        .iter()
        .map(|s| CauseShare {
            cause: name(&s.cause),
            share: s.share,
        })
        .collect()
}

/// "name 58 %, name 32 %": causes with their shares, as the readings say them.
pub fn shares_text(shares: &[CauseShare<CauseKey>]) -> String {
    shares
        .iter()
        // The share without parentheses: a cause's name may end with its own.
        .map(|c| format!("{} {:.0} %", name(&c.cause), c.share * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A survey area's row for the document, its causes worded into its reading (and listed in
/// `top_causes` where the lab asked).
pub fn survey_row(lab: RowWithCauses) -> SurveyRow {
    let mut row = lab.row;
    if let Some(causes) = lab.causes {
        if !causes.shares.is_empty() {
            row.reading.push_str(&causes.lead);
            row.reading.push_str(&shares_text(&causes.shares));
        }
        row.reading.push_str(&causes.rest);
        if causes.listed {
            row.top_causes = Some(named(&causes.shares));
        }
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_stats::details::ReadingCauses;
    use rtlab_stats::result::CauseKind;

    fn cause(kind: CauseKind, ns: u64, task: Option<&str>, reason: Option<ReasonCode>) -> Cause {
        Cause {
            kind,
            duration_ns: ns,
            task: task.map(Into::into),
            pid: task.map(|_| 42),
            prio: Some(0),
            detail: None,
            reason,
            stall_ns: None,
        }
    }

    #[test]
    fn a_time_sharing_task_is_never_said_to_preempt_when_throttling_gave_it_the_time() {
        let throttled = cause(
            CauseKind::Preemption,
            3_000_000,
            Some("sh"),
            Some(ReasonCode::FairServer),
        );
        assert_eq!(
            phrase(&throttled),
            "3.00 ms throttled (the fair server): sh (pid 42, time-sharing) ran meanwhile"
        );
        assert_eq!(
            name(&CauseKey::of(&throttled)),
            "throttled (the fair server)"
        );
        let line = line("cpu0", Measure::Lateness, 3_003_000, 0, &[throttled]);
        assert!(
            line.starts_with("cpu0 late by 3.00 ms at 0.0 s: 3.00 ms throttled"),
            "{line}"
        );
    }

    #[test]
    fn an_outliers_terminal_lines_fit_120_columns_one_cause_a_line() {
        let long = "no event for 2.91 ms inside it: the vCPU was not running (or ran with \
                    interrupts off); the host accounted 2.80 ms of steal time on this CPU \
                    meanwhile, which is what a busy host does to its guests";
        let mut gap = cause(CauseKind::HypervisorGap, 2_910_000, None, None);
        gap.detail = Some(long.into());
        let o = Outlier {
            series: "rt-loop/1234/timer".into(),
            at_ns: 2_000_000_000,
            latency_ns: 3_000_000,
            causes: vec![
                gap,
                cause(CauseKind::Preemption, 80_000, Some("make"), None),
            ],
            cpu: None,
            until_running_ns: None,
            stacks: Vec::new(),
        };
        let lines = describe_lines(&o, Measure::Lateness, 2, 120);
        assert_eq!(lines[0], "  rt-loop/1234/timer late by 3.00 ms at 2.0 s:");
        assert!(
            lines[1].starts_with(
                "    2.91 ms the host held the vCPU or its interrupt back (hypervisor_gap): no event"
            ),
            "{lines:?}"
        );
        assert!(lines.iter().all(|l| l.chars().count() <= 120), "{lines:?}");
        assert!(
            lines
                .last()
                .unwrap()
                .starts_with("    80.0 us preempted by make"),
            "{lines:?}"
        );
        // The detail's own parentheses are the only ones.
        let text = lines.join(" ");
        assert!(!text.contains("((") && !text.contains("gap ("), "{text}");
    }

    #[test]
    fn a_wait_is_worded_as_one_and_an_outlier_without_causes_says_so() {
        let line = line("app/12/lock", Measure::Wait, 2_000_000, 1_000_000_000, &[]);
        assert_eq!(line, "app/12/lock waited 2.00 ms at 1.0 s: no cause found");
    }

    #[test]
    fn a_cause_is_named_as_an_outliers_line_says_it_without_its_time_pid_or_priority() {
        // Regression: the survey said "preemption by make" where the line said the timer
        // interrupt was late while make ran.
        let late = cause(
            CauseKind::Preemption,
            2_000_000,
            Some("make"),
            Some(ReasonCode::TimerLateWhileRunning),
        );
        assert_eq!(
            phrase(&late),
            "2.00 ms timer interrupt late while make (pid 42, time-sharing) ran"
        );
        assert_eq!(
            name(&CauseKey::of(&late)),
            "timer interrupt late while make ran"
        );
        let tick = Cause {
            detail: Some("local_timer".into()),
            ..cause(CauseKind::Irq, 22_000, None, None)
        };
        assert_eq!(phrase(&tick), "22.0 us the timer interrupt (local_timer)");
        assert_eq!(
            name(&CauseKey::of(&tick)),
            "the timer interrupt (local_timer)"
        );
    }

    /// The deepest nesting of parentheses in `text`.
    fn depth(text: &str) -> usize {
        let (mut d, mut most) = (0usize, 0);
        for ch in text.chars() {
            match ch {
                '(' => d += 1,
                ')' => d = d.saturating_sub(1),
                _ => {}
            }
            most = most.max(d);
        }
        most
    }

    #[test]
    fn a_cause_leads_with_plain_words_and_a_stall_inside_one_is_said_as_the_stall() {
        let stalled_tick = Cause {
            detail: Some("local_timer".into()),
            stall_ns: Some(2_910_000),
            reason: Some(ReasonCode::Interrupt),
            ..cause(CauseKind::Irq, 2_950_000, None, None)
        };
        assert_eq!(
            phrase(&stalled_tick),
            "2.95 ms stalled 2.91 ms with no event (interrupts off, or the vCPU not running) in \
             the timer interrupt (local_timer)"
        );
        // A stall does not make it another cause: named as the interrupt it was in.
        assert_eq!(
            name(&CauseKey::of(&stalled_tick)),
            "the timer interrupt (local_timer)"
        );
        let own = Cause {
            detail: Some("from the wakeup to user space".into()),
            stall_ns: Some(1_200_000),
            ..cause(
                CauseKind::Syscall,
                1_210_000,
                None,
                Some(ReasonCode::ThreadItself),
            )
        };
        assert_eq!(
            phrase(&own),
            "1.21 ms stalled 1.20 ms with no event (interrupts off, or the vCPU not running) in \
             the thread's own kernel work (syscall): from the wakeup to user space"
        );
        let rcu = Cause {
            detail: Some("RCU".into()),
            ..cause(
                CauseKind::Softirq,
                31_000,
                None,
                Some(ReasonCode::Interrupt),
            )
        };
        assert_eq!(
            phrase(&rcu),
            "31.0 us memory freed once no reader could still see it (softirq RCU)"
        );
        let ipi = Cause {
            detail: Some("call_function_single".into()),
            ..cause(CauseKind::Irq, 12_000, None, Some(ReasonCode::Interrupt))
        };
        assert_eq!(
            phrase(&ipi),
            "12.0 us another CPU asked this one to run a function (call_function_single)"
        );
        // Every kind leads with words and never nests parentheses.
        for kind in [
            CauseKind::Nmi,
            CauseKind::IdleExit,
            CauseKind::HypervisorGap,
            CauseKind::Syscall,
            CauseKind::Safepoint,
            CauseKind::Unexplained,
        ] {
            let c = Cause {
                detail: Some("a detail (with its own parentheses)".into()),
                ..cause(kind, 10_000, None, None)
            };
            let p = phrase(&c);
            assert!(
                p.starts_with(&format!("10.0 us {}", kind_words(kind))),
                "{p}"
            );
            assert!(p.contains(&format!("({})", kind.as_str())), "{p}");
            assert_eq!(depth(&p), 1, "{p}");
        }
        assert_eq!(depth(&phrase(&stalled_tick)), 1);
    }

    #[test]
    fn a_survey_row_says_its_causes_and_their_shares_where_the_lab_put_them() {
        let share = |c: &Cause, share| CauseShare {
            cause: CauseKey::of(c),
            share,
        };
        let shares = vec![
            share(&cause(CauseKind::Preemption, 1, Some("hog"), None), 0.9),
            share(&cause(CauseKind::Syscall, 1, None, None), 0.1),
        ];
        let lab = |shares| RowWithCauses {
            row: SurveyRow::reading(rtlab_stats::area::Area::Noise, "spun".into()),
            causes: Some(ReadingCauses {
                lead: "; went to ".into(),
                shares,
                rest: "; and more".into(),
                listed: true,
            }),
        };
        let row = survey_row(lab(shares));
        assert_eq!(
            row.reading,
            "spun; went to preempted by hog 90 %, the thread's own kernel work (syscall) 10 %; and more"
        );
        let listed: Vec<&str> = row
            .top_causes
            .iter()
            .flatten()
            .map(|c| c.cause.as_str())
            .collect();
        assert_eq!(
            listed,
            ["preempted by hog", "the thread's own kernel work (syscall)"]
        );
        let row = survey_row(lab(vec![]));
        assert_eq!(row.reading, "spun; and more");
        assert_eq!(row.top_causes, Some(vec![]));
    }
}
