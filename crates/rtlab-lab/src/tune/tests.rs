use super::*;

#[test]
fn a_selector_file_reads_as_its_selected_word() {
    assert_eq!(selected("always [madvise] never"), "madvise");
    assert_eq!(selected("950000"), "950000");
    assert_eq!(selected(" 0-1\n"), "0-1");
    assert_eq!(selected("none voluntary (full) lazy\n"), "full");
}

fn laid_out(files: &[(&str, &str)]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        let path = root.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    root
}

const RUNTIME: Knob = Knob::RtSysctl {
    name: RtSysctl::SchedRtRuntimeUs,
};

#[test]
fn apply_saves_before_it_writes_and_revert_restores_and_checks() {
    let root = laid_out(&[
        ("proc/sys/kernel/sched_rt_runtime_us", "950000\n"),
        (
            "sys/kernel/mm/transparent_hugepage/enabled",
            "always [madvise] never\n",
        ),
    ]);
    let r = root.path();
    let mut plan = Plan::default();
    plan.change(RUNTIME, r, "-1");
    plan.change(Knob::TransparentHugepages, r, "madvise"); // already: no change
    plan.change(Knob::Damon { kdamond: 0 }, r, "off"); // unreadable: no change
    assert_eq!(plan.changes.len(), 1, "{plan:?}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    let state = apply_in(plan, &[1], &file, r).unwrap();
    assert!(state.changes[0].applied, "{state:?}");
    let a = RUNTIME.path_in(r);
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "-1\n");
    let saved = parse_state(&file, &std::fs::read_to_string(&file).unwrap(), r).unwrap();
    assert_eq!(saved.changes, state.changes);
    assert_eq!(saved.changes[0].before, "950000");
    let back = revert_in(&saved, r);
    assert!(back.iter().all(Reverted::restored), "{back:?}");
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "950000\n");
    // A file that no longer takes the old value says so.
    std::fs::remove_file(&a).unwrap();
    std::fs::create_dir(&a).unwrap();
    let back = revert_in(&saved, r);
    assert!(back[0].error.is_some() || !back[0].restored(), "{back:?}");
}

#[test]
fn revert_never_creates_a_file_nor_writes_through_a_link() {
    // Regression (hardening, second review, #1): a planted state file made root create
    // files and write through links.
    let root = laid_out(&[("proc/sys/kernel/x", "")]);
    let r = root.path();
    let state = |before: &str| State {
        rtlab_tune_state: STATE_VERSION,
        rt_cpus: vec![],
        changes: vec![Change {
            knob: RUNTIME,
            path: RUNTIME.path_in(r),
            before: before.into(),
            after: "-1".into(),
            applied: true,
            error: None,
        }],
        verifying: false,
    };
    let back = revert_in(&state("950000"), r);
    assert!(!RUNTIME.path_in(r).exists(), "not created: {back:?}");
    let victim = r.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, RUNTIME.path_in(r)).unwrap();
    let back = revert_in(&state("950000"), r);
    assert!(back[0].error.is_some(), "{back:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

fn one_change(change: serde_json::Value) -> String {
    serde_json::json!({"rtlab_tune_state": STATE_VERSION, "rt_cpus": [1], "changes": [change]})
        .to_string()
}

#[test]
fn a_state_file_names_kinds_not_paths_and_each_value_fits_its_kind() {
    let f = Path::new("s.json");
    let root = Path::new("/");
    let good = serde_json::json!({
        "knob": {"kind": "irq_affinity", "irq": 5},
        "path": "/proc/irq/5/smp_affinity_list",
        "before": "0-1", "after": "0"
    });
    assert!(parse_state(f, &one_change(good.clone()), root).is_ok());
    let with = |key: &str, value: serde_json::Value| {
        let mut c = good.clone();
        c[key] = value;
        parse_state(f, &one_change(c), root)
            .unwrap_err()
            .to_string()
    };
    // The path an attacker wants root to write is not the one the kind maps to.
    let e = with("path", "/root/.ssh/authorized_keys".into());
    assert!(
        e.contains("change 1") && e.contains("/proc/irq/5/smp_affinity_list"),
        "{e}"
    );
    let e = with("before", "ssh-ed25519 AAAA".into());
    assert!(e.contains("not a value of irq_affinity"), "{e}");
    let e = with(
        "knob",
        serde_json::json!({"kind": "file", "path": "/etc/shadow"}),
    );
    assert!(e.contains("not an rtlab tune state file"), "{e}");
    let e = with(
        "knob",
        serde_json::json!({"kind": "irq_affinity", "irq": "../../etc"}),
    );
    assert!(e.contains("not an rtlab tune state file"), "{e}");
    for (knob, ok, bad) in [
        (RUNTIME, "-1", "-2"),
        (Knob::TransparentHugepages, "madvise", "[madvise]"),
        (Knob::Damon { kdamond: 0 }, "off", "of"),
        (Knob::Governor { cpu: 0 }, "performance", "x\ny"),
        (Knob::IdleState { cpu: 0, state: 2 }, "1", "2"),
        (Knob::TimerSlack { tid: 9 }, "50000", "-1"),
        (Knob::FairServerRuntime { cpu: 1 }, "0", "-1"),
        (Knob::FairServerRuntime { cpu: 1 }, "50000000", "5000000000"),
        (Knob::PreemptModel, "full", "(full)"),
        (Knob::PreemptModel, "none", "rt"),
    ] {
        assert!(knob.accepts(ok), "{knob:?} {ok}");
        assert!(!knob.accepts(bad), "{knob:?} {bad}");
    }
}

#[test]
fn a_state_file_of_another_kind_is_refused() {
    let f = Path::new("x.json");
    let e = parse_state(f, "{\"schema_version\": 1}", Path::new("/")).unwrap_err();
    assert!(
        e.to_string().contains("not an rtlab tune state file"),
        "{e}"
    );
    let text = "{\"rtlab_tune_state\": 9, \"rt_cpus\": [], \"changes\": []}";
    let e = parse_state(f, text, Path::new("/")).unwrap_err();
    assert!(e.to_string().contains("version 9"), "{e}");
}

#[test]
fn the_plan_reads_a_laid_out_machine() {
    let root = laid_out(&[
        ("proc/sys/kernel/sched_rt_runtime_us", "950000\n"),
        ("proc/irq/9/smp_affinity_list", "0-1\n"),
        ("proc/irq/9/acpi/spurious", ""),
        ("proc/irq/36/smp_affinity_list", "0-1\n"),
        ("proc/irq/36/virtio1-req.0/x", ""),
        ("sys/kernel/mm/damon/admin/kdamonds/0/state", "on\n"),
    ]);
    // IRQ 36's CPUs are the kernel's (a managed queue's): its file is read-only.
    use std::os::unix::fs::PermissionsExt;
    let fixed = root.path().join("proc/irq/36/smp_affinity_list");
    std::fs::set_permissions(&fixed, std::fs::Permissions::from_mode(0o444)).unwrap();
    let cfg = TuneConfig {
        rt_cpus: vec![1],
        only: None,
        slack_pid: None,
    };
    let plan = plan_in(&cfg, root.path());
    let knobs: Vec<Knob> = plan.changes.iter().map(|c| c.knob).collect();
    assert!(knobs.contains(&RUNTIME), "{plan:?}");
    assert!(knobs.contains(&Knob::Damon { kdamond: 0 }), "{plan:?}");
    if rtlab_sys::affinity::usable_cpus().as_slice().len() > 1 {
        assert!(knobs.contains(&Knob::IrqAffinity { irq: 9 }), "{plan:?}");
        assert!(!knobs.contains(&Knob::IrqAffinity { irq: 36 }), "{plan:?}");
        let note = (plan.printed.iter())
            .find(|(id, _)| id == "irq_affinity")
            .map(|(_, n)| n.as_str())
            .unwrap_or("");
        assert!(
            note.starts_with("the kernel places IRQ 36 itself")
                && note.contains("isolcpus=managed_irq,1 has the kernel move it "),
            "{note}"
        );
    }
}

fn debugfs_cfg() -> TuneConfig {
    TuneConfig {
        rt_cpus: vec![1],
        only: Some(vec!["preempt_model".into(), "fair_server".into()]),
        slack_pid: None,
    }
}

#[test]
fn the_fair_server_and_the_preemption_model_are_switched_and_switched_back() {
    let root = laid_out(&[
        ("proc/sys/kernel/version", "#1 SMP PREEMPT_DYNAMIC @0\n"),
        ("proc/sys/kernel/osrelease", "6.18.44\n"),
        (
            "sys/kernel/debug/sched/preempt",
            "(none) voluntary full lazy\n",
        ),
        (
            "sys/kernel/debug/sched/fair_server/cpu0/runtime",
            "50000000\n",
        ),
        (
            "sys/kernel/debug/sched/fair_server/cpu1/runtime",
            "50000000\n",
        ),
        (
            "sys/kernel/debug/sched/fair_server/cpu1/period",
            "1000000000\n",
        ),
    ]);
    let r = root.path();
    let plan = plan_in(&debugfs_cfg(), r);
    let planned: Vec<(Knob, &str, &str)> = plan
        .changes
        .iter()
        .map(|c| (c.knob, c.before.as_str(), c.after.as_str()))
        .collect();
    assert_eq!(
        planned,
        [
            (Knob::PreemptModel, "none", "full"),
            (Knob::FairServerRuntime { cpu: 1 }, "50000000", "0"),
        ],
        "only the RT CPU's server"
    );
    assert!(
        plan.printed
            .iter()
            .any(|(id, note)| id == "preempt_model" && note.contains("preempt=full")),
        "{plan:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    let state = apply_in(plan, &[1], &file, r).unwrap();
    assert!(state.changes.iter().all(|c| c.applied), "{state:?}");
    let text = |k: Knob| std::fs::read_to_string(k.path_in(r)).unwrap();
    assert_eq!(text(Knob::PreemptModel), "full\n");
    assert_eq!(text(Knob::FairServerRuntime { cpu: 1 }), "0\n");
    let saved = parse_state(&file, &std::fs::read_to_string(&file).unwrap(), r).unwrap();
    let back = revert_in(&saved, r);
    assert!(back.iter().all(Reverted::restored), "{back:?}");
    assert_eq!(text(Knob::PreemptModel), "none\n");
    assert_eq!(text(Knob::FairServerRuntime { cpu: 1 }), "50000000\n");
    assert_eq!(text(Knob::FairServerRuntime { cpu: 0 }), "50000000\n");
    // Already full: nothing to switch.
    std::fs::write(
        Knob::PreemptModel.path_in(r),
        "none voluntary (full) lazy\n",
    )
    .unwrap();
    assert!(plan_in(&debugfs_cfg(), r)
        .changes
        .iter()
        .all(|c| c.knob != Knob::PreemptModel));
}

#[test]
fn without_a_readable_debugfs_tune_says_it_cannot_and_plans_nothing() {
    let root = laid_out(&[
        ("proc/sys/kernel/version", "#1 SMP PREEMPT_DYNAMIC @0\n"),
        ("proc/sys/kernel/osrelease", "6.18.44\n"),
    ]);
    std::fs::create_dir_all(root.path().join("sys/kernel/debug")).unwrap();
    let plan = plan_in(&debugfs_cfg(), root.path());
    assert!(plan.changes.is_empty(), "{plan:?}");
    let note = |id: &str| {
        plan.printed
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, n)| n.clone())
            .unwrap_or_default()
    };
    assert!(
        note("preempt_model").contains("cannot read: debugfs is not mounted"),
        "{plan:?}"
    );
    assert!(
        note("fair_server")
            .starts_with("cannot apply it here: cannot read: debugfs is not mounted"),
        "{plan:?}"
    );
    // A kernel before the fair server, without run-time preemption switching: nothing to say.
    std::fs::write(
        root.path().join("proc/sys/kernel/version"),
        "#1 SMP PREEMPT\n",
    )
    .unwrap();
    std::fs::write(root.path().join("proc/sys/kernel/osrelease"), "6.6.1\n").unwrap();
    let plan = plan_in(&debugfs_cfg(), root.path());
    assert!(
        plan.printed.is_empty() && plan.changes.is_empty(),
        "{plan:?}"
    );
}
