use super::*;
use std::cell::RefCell;
use std::rc::Rc;

/// Which fixes are on, shared by the fakes.
type On = Rc<RefCell<Vec<bool>>>;

struct Fake {
    id: String,
    index: usize,
    on: On,
}

impl Fix for Fake {
    fn id(&self) -> &str {
        &self.id
    }
    fn set(&mut self, on: bool) -> Result<(), String> {
        self.on.borrow_mut()[self.index] = on;
        Ok(())
    }
}

/// A machine whose p99 is 100 us times each fix's factor while it is on, with a drift from
/// block to block (the same for every arm of a round, as interleaving assumes) and its
/// block-to-block noise; `fail_at`: the block that fails.
struct Machine {
    on: On,
    factors: Vec<f64>,
    blocks: usize,
    /// Blocks per round (the baseline and each fix).
    arms: usize,
    fail_at: Option<usize>,
    /// What was on at each block.
    seen: Vec<Vec<bool>>,
}

impl Measure for Machine {
    fn block(&mut self, explain: bool) -> Result<Block, String> {
        self.blocks += 1;
        if self.fail_at == Some(self.blocks) {
            return Err("the measurement crashed".into());
        }
        let on = self.on.borrow().clone();
        self.seen.push(on.clone());
        let factor: f64 = on
            .iter()
            .zip(&self.factors)
            .filter(|(on, _)| **on)
            .map(|(_, f)| f)
            .product();
        // Noise within +-3 %, a drift of up to 2x across rounds.
        let noise = 1.0 + 0.03 * (((self.blocks * 7919) % 13) as f64 / 6.0 - 1.0);
        let round = self.blocks.saturating_sub(2) / self.arms;
        let drift = 1.0 + (round % 5) as f64 / 4.0;
        let p99 = 100_000.0 * factor * noise * drift;
        let causes = explain.then(|| {
            let mut c = Causes::new();
            let kind = if factor < 1.0 {
                "hypervisor_gap"
            } else {
                "irq"
            };
            c.insert(
                kind.into(),
                Tally {
                    main: 3,
                    total_ns: p99 as u64,
                },
            );
            c
        });
        Ok(Block {
            figures: Figures {
                p99,
                max: p99 * 2.0,
                count: 1000,
            },
            causes,
        })
    }
}

fn machine(factors: &[f64]) -> (Machine, Vec<Fake>) {
    let on: On = Rc::new(RefCell::new(vec![false; factors.len()]));
    let fakes = (0..factors.len())
        .map(|i| Fake {
            id: format!("fix{i}"),
            index: i,
            on: on.clone(),
        })
        .collect();
    let m = Machine {
        on,
        factors: factors.to_vec(),
        blocks: 0,
        arms: factors.len() + 1,
        fail_at: None,
        seen: vec![],
    };
    (m, fakes)
}

fn run(
    m: &mut Machine,
    fakes: &mut [Fake],
    unmeasured: &[Option<String>],
    settings: Settings,
    stop_after: Option<usize>,
) -> Result<Verification, String> {
    let mut fixes: Vec<&mut dyn Fix> = fakes.iter_mut().map(|f| f as &mut dyn Fix).collect();
    let rounds = std::cell::Cell::new(0);
    let stop = || stop_after.is_some_and(|n| rounds.get() >= n);
    verify(&mut fixes, unmeasured, m, settings, &stop, &mut |p| {
        if let Progress::Round(..) = p {
            rounds.set(rounds.get() + 1)
        }
    })
}

const TEN: Settings = Settings {
    rounds: 10,
    keep_all: false,
};

#[test]
fn a_fix_that_helps_is_kept_one_that_hurts_or_does_nothing_is_taken_back() {
    let (mut m, mut fakes) = machine(&[0.7, 1.5, 1.0]);
    let v = run(&mut m, &mut fakes, &[None, None, None], TEN, None).unwrap();
    let effects: Vec<Effect> = v.fixes.iter().map(|f| f.effect).collect();
    assert_eq!(
        effects,
        [Effect::Helped, Effect::Hurt, Effect::Unclear],
        "{v:#?}"
    );
    assert_eq!(v.kept(), ["fix0"]);
    assert!(v.fixes[0].p99_ratio.unwrap().under(0.75), "{v:#?}");
    // The kept fix stays on, the rest are off.
    assert_eq!(*m.on.borrow(), [true, false, false]);
    assert_eq!(
        (v.rounds, v.baseline.len(), v.fixes[1].blocks.len()),
        (10, 10, 10)
    );
    // Each block had at most one fix on, between the explained first and last; the last
    // was measured with the kept fix.
    let inner = &m.seen[1..m.seen.len() - 1];
    assert!(inner
        .iter()
        .all(|on| on.iter().filter(|o| **o).count() <= 1));
    assert_eq!(m.seen.last().unwrap(), &[true, false, false]);
    // The arms' order changes: the baseline is not always first.
    let base_first = (0..10)
        .filter(|r| m.seen[1 + r * 4].iter().all(|o| !o))
        .count();
    assert!(base_first < 10, "{:?}", m.seen);
    let causes = compared(&v.causes_before, &v.causes_after);
    let kinds: Vec<&str> = causes.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(kinds, ["hypervisor_gap", "irq"]);
}

#[test]
fn over_a_whole_square_every_arm_leads_and_follows_every_other_equally_often() {
    for arms in 1..=7usize {
        let rows = if arms.is_multiple_of(2) {
            arms
        } else {
            2 * arms
        };
        let mut first = vec![0; arms];
        let mut after = vec![vec![0; arms]; arms];
        for round in 0..rows {
            let o = order(round, arms);
            let mut sorted = o.clone();
            sorted.sort();
            assert_eq!(sorted, (0..arms).collect::<Vec<_>>(), "{arms}: {o:?}");
            first[o[0]] += 1;
            for w in o.windows(2) {
                after[w[0]][w[1]] += 1;
            }
        }
        assert!(first.iter().all(|&n| n == first[0]), "{arms}: {first:?}");
        let pairs: Vec<usize> = (0..arms)
            .flat_map(|a| (0..arms).filter(move |&b| b != a).map(move |b| (a, b)))
            .map(|(a, b)| after[a][b])
            .collect();
        assert!(pairs.iter().all(|&n| n == pairs[0]), "{arms}: {after:?}");
    }
}

#[test]
fn keep_all_keeps_every_measured_fix_and_an_unmeasured_one_is_only_said() {
    let (mut m, mut fakes) = machine(&[1.5, 0.5]);
    let why = vec![
        None,
        Some("the measurement does not run process 42".to_string()),
    ];
    let v = run(&mut m, &mut fakes, &why, TEN, None).unwrap();
    assert_eq!(v.fixes[1].effect, Effect::Unmeasured);
    assert!(v.fixes[1].blocks.is_empty());
    assert_eq!(v.kept(), Vec::<&str>::new());
    assert_eq!(*m.on.borrow(), [false, false]);
    // Nothing kept: no block after, no causes after.
    assert!(v.after.is_none() && v.causes_after.is_empty());
    assert_eq!(m.seen.len(), 1 + 10 * 2);
    let all = Settings {
        keep_all: true,
        ..TEN
    };
    let (mut m, mut fakes) = machine(&[1.5, 0.5]);
    let v = run(&mut m, &mut fakes, &why, all, None).unwrap();
    assert_eq!(v.kept(), ["fix0", "fix1"]);
    assert_eq!(*m.on.borrow(), [true, true]);
}

#[test]
fn a_stop_or_a_failed_measurement_leaves_every_fix_off() {
    let (mut m, mut fakes) = machine(&[0.5, 0.5]);
    let v = run(&mut m, &mut fakes, &[None, None], TEN, Some(3)).unwrap();
    assert!(v.interrupted);
    assert_eq!(v.rounds, 3);
    assert!(v.kept().is_empty());
    assert_eq!(*m.on.borrow(), [false, false]);
    // A crash in the middle of a fix's block.
    let (mut m, mut fakes) = machine(&[0.5, 0.5]);
    m.fail_at = Some(6);
    let e = run(&mut m, &mut fakes, &[None, None], TEN, None).unwrap_err();
    assert!(e.contains("crashed"), "{e}");
    assert_eq!(*m.on.borrow(), [false, false]);
}

#[test]
fn too_few_rounds_decide_nothing() {
    let (mut m, mut fakes) = machine(&[0.5]);
    let few = Settings {
        rounds: 4,
        keep_all: false,
    };
    let v = run(&mut m, &mut fakes, &[None], few, None).unwrap();
    assert_eq!(v.fixes[0].effect, Effect::Unclear);
    assert!(v.kept().is_empty());
}

/// RT throttling's change (sched_rt_runtime_us 950000 -> -1) laid out under `r`: the file and
/// its group.
fn rt_throttling_in(r: &std::path::Path) -> (std::path::PathBuf, Vec<Changes>) {
    let runtime = r.join("proc/sys/kernel/sched_rt_runtime_us");
    std::fs::create_dir_all(runtime.parent().unwrap()).unwrap();
    std::fs::write(&runtime, "950000\n").unwrap();
    let mut plan = super::super::Plan::default();
    let knob = super::super::Knob::RtSysctl {
        name: super::super::RtSysctl::SchedRtRuntimeUs,
    };
    plan.change(knob, r, "-1");
    (runtime, Changes::grouped_in(plan.changes, r.to_path_buf()))
}

#[test]
fn a_group_of_changes_is_written_on_and_back_off() {
    let root = tempfile::tempdir().unwrap();
    let (runtime, mut groups) = rt_throttling_in(root.path());
    assert_eq!(groups.len(), 1);
    let g = &mut groups[0];
    assert_eq!(g.id(), "rt_throttling");
    g.set(true).unwrap();
    assert_eq!(std::fs::read_to_string(&runtime).unwrap(), "-1\n");
    assert!(g.changes[0].applied);
    g.set(false).unwrap();
    assert_eq!(std::fs::read_to_string(&runtime).unwrap(), "950000\n");
}

#[test]
fn a_thread_that_exits_during_the_run_is_left_out_not_an_error() {
    // A laid-out process of two threads (each /proc/<tid>/timerslack_ns), one of which exits
    // after the first round: its file goes, the run goes on with the other.
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let mut plan = super::super::Plan::default();
    for tid in [41, 42] {
        let file = r.join(format!("proc/{tid}/timerslack_ns"));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "50000\n").unwrap();
        plan.change(super::super::Knob::TimerSlack { tid }, r, "1");
    }
    let mut groups = Changes::grouped_in(plan.changes, r.to_path_buf());
    let g = &mut groups[0];
    assert_eq!(g.id(), "timer_slack");
    g.set(true).unwrap();
    g.set(false).unwrap();
    std::fs::remove_dir_all(r.join("proc/42")).unwrap();
    g.set(true).unwrap();
    assert_eq!(
        std::fs::read_to_string(r.join("proc/41/timerslack_ns")).unwrap(),
        "1\n"
    );
    assert_eq!(
        g.changes[1].error.as_deref(),
        Some("its thread exited during the run")
    );
    g.set(false).unwrap();
    assert_eq!(
        std::fs::read_to_string(r.join("proc/41/timerslack_ns")).unwrap(),
        "50000\n"
    );
    // Any other failure still ends the run (a setting whose file went is not a thread's).
    let (runtime, mut groups) = rt_throttling_in(r);
    groups[0].set(true).unwrap();
    std::fs::remove_file(&runtime).unwrap();
    assert!(groups[0].set(false).is_err());
}
