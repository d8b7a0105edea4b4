//! What tune changed, carried to other machines and to the next boot: a tuned profile (the
//! realtime profile's conventions), the kernel command line of the fixes only a boot makes,
//! or a systemd unit that applies the same fixes at boot and reverts them when stopped. Each
//! says what it cannot carry, and why.

use super::{Change, Knob, RtSysctl};
use rtlab_sys::affinity::CpuList;

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A tuned profile directory (`tuned.conf`).
    Tuned,
    /// The kernel parameters (printed).
    Cmdline,
    /// A systemd oneshot unit (`rtlab-tune.service`).
    Systemd,
}

impl Format {
    /// The format `name` names.
    pub fn parse(name: &str) -> Option<Format> {
        match name {
            "tuned" => Some(Format::Tuned),
            "cmdline" => Some(Format::Cmdline),
            "systemd" => Some(Format::Systemd),
            _ => None,
        }
    }

    /// Whether it is written into a directory (else printed).
    pub fn writes_files(self) -> bool {
        self != Format::Cmdline
    }
}

/// An export: the files to write (name in the directory, content) or the text to print, and
/// the fixes it cannot carry with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Export {
    pub files: Vec<(String, String)>,
    pub printed: String,
    pub cannot: Vec<(&'static str, String)>,
}

/// Where the fixes come from, for the files' first lines (`a state file ...`, `the plan ...`).
#[derive(Debug)]
pub struct Source<'a> {
    pub what: &'a str,
    /// The real-time CPUs.
    pub rt_cpus: &'a [usize],
    /// Every CPU of the machine (for the housekeeping ones: those not real-time).
    pub online: &'a [usize],
    /// The rtlab binary the unit runs.
    pub rtlab: &'a str,
}

/// `changes` (what tune applied or plans) as `format`.
pub fn export(format: Format, changes: &[Change], src: &Source) -> Export {
    match format {
        Format::Tuned => tuned(changes, src),
        Format::Cmdline => cmdline(changes, src),
        Format::Systemd => systemd(changes, src),
    }
}

fn list(cpus: &[usize]) -> String {
    CpuList::from(cpus.to_vec()).to_string()
}

fn housekeeping(src: &Source) -> Vec<usize> {
    (src.online.iter())
        .copied()
        .filter(|c| !src.rt_cpus.contains(c))
        .collect()
}

/// Why a per-process timer slack cannot be carried by any of them.
fn slack_why() -> String {
    "a thread's own setting, gone with its process: start the program with rtlab exec --slack \
     1ns -- CMD (or prctl(PR_SET_TIMERSLACK, 1) in it)"
        .into()
}

fn tuned(changes: &[Change], src: &Source) -> Export {
    let mut out = Export::default();
    let (mut sysctl, mut sysfs, mut boot) = (Vec::new(), Vec::new(), Vec::new());
    let mut irqs = false;
    for c in changes {
        match c.knob {
            Knob::RtSysctl { name } => sysctl.push(format!(
                "kernel.{} = {}",
                match name {
                    RtSysctl::SchedRtRuntimeUs => "sched_rt_runtime_us",
                    RtSysctl::SchedRtPeriodUs => "sched_rt_period_us",
                },
                c.after
            )),
            Knob::TransparentHugepages
            | Knob::Damon { .. }
            | Knob::Governor { .. }
            | Knob::IdleState { .. } => {
                sysfs.push(format!("{} = {}", c.knob.path().display(), c.after))
            }
            Knob::IrqAffinity { .. } => {
                // (The interrupts the kernel manages refuse tuned's writes as rtlab's: only
                // the command line moves them off, where their queues allow. managed_irq
                // alone: no scheduler isolation, which is not a fix tune kept.)
                if !irqs {
                    boot.push("isolcpus=managed_irq,${isolated_cores}".into());
                }
                irqs = true
            }
            Knob::PreemptModel => boot.push(format!("preempt={}", c.after)),
            Knob::TimerSlack { .. } => out.cannot.push(("timer_slack", slack_why())),
            Knob::FairServerRuntime { .. } => out.cannot.push((
                "fair_server",
                "a debugfs setting, which tuned does not write: the systemd export applies it at \
                 each boot"
                    .into(),
            )),
        }
    }
    sysfs.dedup();
    out.cannot.dedup();
    let mut text = format!(
        "# A tuned profile of the real-time fixes {} (rtlab tune --export tuned).\n\
         # Install: cp -r THIS_DIR /etc/tuned/rtlab-rt && tuned-adm profile rtlab-rt\n\
         [main]\nsummary=rtlab: real-time fixes for CPUs {}\n\n[variables]\nisolated_cores={}\n",
        src.what,
        list(src.rt_cpus),
        list(src.rt_cpus)
    );
    let mut section = |name: &str, lines: &[String]| {
        if !lines.is_empty() {
            text.push_str(&format!("\n[{name}]\n{}\n", lines.join("\n")));
        }
    };
    section("sysctl", &sysctl);
    section("sysfs", &sysfs);
    if irqs {
        // (As the realtime profile does: irqbalance keeps off them, tuned moves the IRQs.)
        section("irqbalance", &["banned_cpus=${isolated_cores}".into()]);
        section("scheduler", &["isolated_cores=${isolated_cores}".into()]);
    }
    if !boot.is_empty() {
        section(
            "bootloader",
            &[format!("cmdline_rtlab=+{}", boot.join(" "))],
        );
    }
    out.files.push(("tuned.conf".into(), text));
    out
}

fn cmdline(changes: &[Change], src: &Source) -> Export {
    let mut out = Export::default();
    let rt = list(src.rt_cpus);
    let mut params = vec![
        // (managed_irq: the interrupts the kernel spreads itself, which no write moves,
        // kept off them too; domain: what isolcpus=CPUS alone means.)
        format!("isolcpus=managed_irq,domain,{rt}"),
        format!("nohz_full={rt}"),
        format!("rcu_nocbs={rt}"),
    ];
    let others = housekeeping(src);
    if !others.is_empty() {
        params.push(format!("irqaffinity={}", list(&others)));
    }
    let preempt = (changes.iter())
        .find(|c| c.knob == Knob::PreemptModel)
        .map_or("full", |c| c.after.as_str());
    params.push(format!("preempt={preempt}"));
    if changes.iter().any(|c| {
        c.knob
            == Knob::RtSysctl {
                name: RtSysctl::SchedRtRuntimeUs,
            }
    }) {
        // (sysctl.* on the command line: Linux 5.8 on.)
        params.push("sysctl.kernel.sched_rt_runtime_us=-1".into());
    }
    out.printed = params.join(" ");
    for c in changes {
        if let Knob::TimerSlack { .. } = c.knob {
            out.cannot.push(("timer_slack", slack_why()));
        }
    }
    out.cannot.dedup();
    out
}

fn systemd(changes: &[Change], src: &Source) -> Export {
    let mut out = Export::default();
    let mut ids: Vec<&str> = (changes.iter())
        .map(|c| c.id())
        .filter(|&id| id != "timer_slack")
        .collect();
    ids.dedup();
    if changes.iter().any(|c| c.id() == "timer_slack") {
        out.cannot.push(("timer_slack", slack_why()));
    }
    let state = "/run/rtlab-tune-boot.json";
    let only = match ids.is_empty() {
        true => String::new(),
        false => format!(" --only {}", ids.join(",")),
    };
    let unit = format!(
        "# The real-time fixes {} (rtlab tune --export systemd), applied at each boot and\n\
         # reverted when the unit stops. Install: cp rtlab-tune.service /etc/systemd/system/ &&\n\
         # systemctl daemon-reload && systemctl enable --now rtlab-tune.service\n\
         [Unit]\n\
         Description=rtlab: real-time fixes for CPUs {}\n\
         After=local-fs.target\n\n\
         [Service]\n\
         Type=oneshot\n\
         RemainAfterExit=yes\n\
         ExecStart={} tune --apply --state {state} --cpus {}{only}\n\
         ExecStop={} tune --revert {state}\n\n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        src.what,
        list(src.rt_cpus),
        src.rtlab,
        list(src.rt_cpus),
        src.rtlab,
    );
    out.files.push(("rtlab-tune.service".into(), unit));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(knob: Knob, after: &str) -> Change {
        Change {
            path: knob.path(),
            knob,
            before: "x".into(),
            after: after.into(),
            applied: true,
            error: None,
        }
    }

    fn kept() -> Vec<Change> {
        vec![
            change(
                Knob::RtSysctl {
                    name: RtSysctl::SchedRtRuntimeUs,
                },
                "-1",
            ),
            change(Knob::IrqAffinity { irq: 24 }, "0"),
            change(Knob::IrqAffinity { irq: 25 }, "0"),
            change(Knob::TransparentHugepages, "never"),
            change(Knob::IdleState { cpu: 1, state: 2 }, "1"),
            change(Knob::PreemptModel, "full"),
            change(Knob::TimerSlack { tid: 42 }, "1"),
            change(Knob::FairServerRuntime { cpu: 1 }, "0"),
        ]
    }

    fn src() -> Source<'static> {
        Source {
            what: "kept by a test",
            rt_cpus: &[1],
            online: &[0, 1],
            rtlab: "/usr/bin/rtlab",
        }
    }

    #[test]
    fn a_tuned_profile_carries_each_fix_in_its_section_and_says_what_it_cannot() {
        let e = export(Format::Tuned, &kept(), &src());
        let (name, text) = &e.files[0];
        assert_eq!(name, "tuned.conf");
        for line in [
            "[main]\nsummary=rtlab: real-time fixes for CPUs 1",
            "[variables]\nisolated_cores=1",
            "[sysctl]\nkernel.sched_rt_runtime_us = -1",
            "/sys/kernel/mm/transparent_hugepage/enabled = never",
            "/sys/devices/system/cpu/cpu1/cpuidle/state2/disable = 1",
            "[irqbalance]\nbanned_cpus=${isolated_cores}",
            "[scheduler]\nisolated_cores=${isolated_cores}",
            "[bootloader]\ncmdline_rtlab=+",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        // The interrupts tuned cannot move (the kernel manages them) kept off at boot.
        let boot = text.split("cmdline_rtlab=+").nth(1).unwrap();
        let params: Vec<&str> = boot.lines().next().unwrap().split(' ').collect();
        assert_eq!(
            params,
            ["isolcpus=managed_irq,${isolated_cores}", "preempt=full"],
            "{text}"
        );
        assert_eq!(text.matches("[irqbalance]").count(), 1);
        let ids: Vec<_> = e.cannot.iter().map(|c| c.0).collect();
        assert_eq!(ids, ["timer_slack", "fair_server"]);
    }

    #[test]
    fn the_command_line_partitions_the_rt_cpus_and_keeps_the_irqs_on_the_others() {
        let e = export(Format::Cmdline, &kept(), &src());
        assert_eq!(
            e.printed,
            "isolcpus=managed_irq,domain,1 nohz_full=1 rcu_nocbs=1 irqaffinity=0 preempt=full \
             sysctl.kernel.sched_rt_runtime_us=-1"
        );
        assert!(e.files.is_empty());
        assert_eq!(e.cannot[0].0, "timer_slack");
    }

    #[test]
    fn the_unit_applies_the_same_fixes_at_boot_and_reverts_them_when_stopped() {
        let e = export(Format::Systemd, &kept(), &src());
        let (name, unit) = &e.files[0];
        assert_eq!(name, "rtlab-tune.service");
        assert!(unit.contains(
            "ExecStart=/usr/bin/rtlab tune --apply --state /run/rtlab-tune-boot.json --cpus 1 \
             --only rt_throttling,irq_affinity,transparent_hugepages,c_states,preempt_model,fair_server"
        ), "{unit}");
        assert!(unit.contains("ExecStop=/usr/bin/rtlab tune --revert /run/rtlab-tune-boot.json"));
        assert!(unit.contains("Type=oneshot\nRemainAfterExit=yes"));
        assert_eq!(e.cannot.len(), 1);
    }
}
