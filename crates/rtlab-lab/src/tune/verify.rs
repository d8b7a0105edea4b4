//! `rtlab tune --verify`: each fix measured against the machine without it, in interleaved
//! blocks, and kept only where it measurably helped.
//!
//! The method is the benches': a fix's effect is a ratio (the block with it over the block
//! without it in the same round), taken over many short rounds, each round running the
//! machine as found and each fix alone in an order that changes from round to round
//! ([`order`]: no arm always first, none always after the same other), so the host's drift
//! hits every arm alike. A fix helped when the 95 % interval of its p99 or its max ratio lies wholly
//! under 1 and neither lies wholly over 1; it hurt when one lies wholly over 1 and neither
//! under; anything else is unclear. Fixes are measured one at a time, not together: a fix
//! that only helps beside another shows as unclear. The engine knows fixes and measurements
//! only through [`Fix`] and [`Measure`]; the command line gives it the machine's settings and
//! `rtlab wakeup` or `rtlab watch` runs, a test a planted fix that hurts.

use super::Change;
use rtlab_stats::Interval;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One block's figures: the worst series' p99 and max (ns), and the samples of all.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figures {
    pub p99: f64,
    pub max: f64,
    pub count: u64,
}

/// The causes of one explained block's outliers, by kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tally {
    /// Outliers this kind was the main cause of.
    pub main: u64,
    /// Its time over all the outliers (ns).
    pub total_ns: u64,
}

/// Cause kind -> its tally.
pub type Causes = BTreeMap<String, Tally>;

/// One measured block.
#[derive(Debug, Clone)]
pub struct Block {
    pub figures: Figures,
    /// The causes of its worst outliers, when the block was explained.
    pub causes: Option<Causes>,
}

/// A fix the engine can turn on and off.
pub trait Fix {
    /// Its check id.
    fn id(&self) -> &str;
    /// Sets it (`on`) or takes it back; an error ends the verification.
    fn set(&mut self, on: bool) -> Result<(), String>;
}

/// How a block is measured (the same way in every arm).
pub trait Measure {
    /// Measures one block; `explain`: also name the causes of its outliers.
    fn block(&mut self, explain: bool) -> Result<Block, String>;
}

/// What the verification found of one fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Its p99 or max ratio wholly under 1, neither wholly over.
    Helped,
    /// One wholly over 1, neither wholly under.
    Hurt,
    /// Neither, or both (a better p99 and a worse max).
    Unclear,
    /// Not measured: the measurement cannot see it.
    Unmeasured,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Helped => "helped",
            Effect::Hurt => "hurt",
            Effect::Unclear => "unclear",
            Effect::Unmeasured => "not measured",
        }
    }

    /// From the two ratios' intervals.
    pub fn of(p99: &Interval, max: &Interval) -> Effect {
        let better = p99.under(1.0) || max.under(1.0);
        let worse = p99.over(1.0) || max.over(1.0);
        match (better, worse) {
            (true, false) => Effect::Helped,
            (false, true) => Effect::Hurt,
            _ => Effect::Unclear,
        }
    }
}

/// One fix's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub id: String,
    pub effect: Effect,
    /// p99 with the fix over p99 without it, same round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ratio: Option<Interval>,
    /// The same of the max.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ratio: Option<Interval>,
    /// Left applied at the end.
    pub kept: bool,
    /// Why it was not measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmeasured: Option<String>,
    /// Its blocks, round by round.
    pub blocks: Vec<Figures>,
}

/// The verification's settings.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Rounds of blocks (6 or more for an interval).
    pub rounds: usize,
    /// Keep every measured fix, whatever its effect.
    pub keep_all: bool,
}

/// What the verification measured and decided.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verification {
    /// Complete rounds (an interrupted one is left out).
    pub rounds: usize,
    /// The machine as found, round by round.
    pub baseline: Vec<Figures>,
    pub fixes: Vec<Outcome>,
    /// The explained block before any change, and the one with the kept fixes (none when
    /// none was kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Figures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Figures>,
    pub causes_before: Causes,
    pub causes_after: Causes,
    /// Stopped before its end (nothing is kept then).
    pub interrupted: bool,
}

impl Verification {
    /// The ids of the kept fixes.
    pub fn kept(&self) -> Vec<&str> {
        self.fixes
            .iter()
            .filter(|f| f.kept)
            .map(|f| f.id.as_str())
            .collect()
    }
}

/// What the engine tells its caller as it goes.
#[derive(Debug)]
pub enum Progress<'a> {
    /// A round ended: the baseline's block and each measured fix's, in fix order.
    Round(usize, &'a Figures, &'a [(String, Figures)]),
    /// The explained blocks.
    Before(&'a Figures),
    After(&'a Figures),
}

/// Measures `fixes` (all off on entry: the machine as found) with `measure`; `unmeasured[i]`
/// says why fix i cannot be measured (it is then kept only with `keep_all`). Returns with
/// the kept fixes on and the rest off; on an error or `stop()`, every fix is off.
pub fn verify(
    fixes: &mut [&mut dyn Fix],
    unmeasured: &[Option<String>],
    measure: &mut dyn Measure,
    settings: Settings,
    stop: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<Verification, String> {
    let result = measure_all(fixes, unmeasured, measure, settings, stop, progress);
    if !matches!(&result, Ok(v) if !v.interrupted) {
        // An error or a stop leaves nothing applied: every fix off, errors or not.
        for f in fixes.iter_mut() {
            let _ = f.set(false);
        }
    }
    result
}

fn measure_all(
    fixes: &mut [&mut dyn Fix],
    unmeasured: &[Option<String>],
    measure: &mut dyn Measure,
    settings: Settings,
    stop: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<Verification, String> {
    let mut v = Verification::default();
    let before = measure.block(true)?;
    progress(Progress::Before(&before.figures));
    v.before = Some(before.figures);
    v.causes_before = before.causes.unwrap_or_default();
    let measured: Vec<usize> = (0..fixes.len())
        .filter(|&i| unmeasured.get(i).is_none_or(|u| u.is_none()))
        .collect();
    let mut blocks: Vec<Vec<Figures>> = vec![Vec::new(); fixes.len()];
    for round in 0..settings.rounds {
        let Some((base, theirs)) = one_round(fixes, &measured, measure, round, stop)? else {
            v.interrupted = true;
            return Ok(v);
        };
        let named: Vec<(String, Figures)> = measured
            .iter()
            .zip(&theirs)
            .map(|(&i, f)| (fixes[i].id().to_string(), *f))
            .collect();
        progress(Progress::Round(round + 1, &base, &named));
        v.baseline.push(base);
        for (&i, f) in measured.iter().zip(theirs) {
            blocks[i].push(f);
        }
        v.rounds = round + 1;
    }
    v.fixes = outcomes(fixes, unmeasured, &v.baseline, blocks, settings.keep_all);
    if v.kept().is_empty() {
        // The machine is as found: nothing to measure after.
        return Ok(v);
    }
    for (f, o) in fixes.iter_mut().zip(&v.fixes) {
        if o.kept {
            f.set(true)?;
        }
    }
    let after = measure.block(true)?;
    progress(Progress::After(&after.figures));
    v.after = Some(after.figures);
    v.causes_after = after.causes.unwrap_or_default();
    Ok(v)
}

/// The order of a round's `arms` (0: the baseline): the rows of a Williams square, round by
/// round, so that over a whole square every arm comes first as often as every other and
/// follows every other as often (a block after a hog's, on a CPU kept warm by it, is not
/// always the same arm's: a plain rotation made a fix that does nothing look like it helped).
pub fn order(round: usize, arms: usize) -> Vec<usize> {
    if arms == 0 {
        return Vec::new();
    }
    // 0, 1, n-1, 2, n-2, ...
    let first: Vec<usize> = (0..arms)
        .map(|j| match j % 2 {
            0 => (arms - j / 2) % arms,
            _ => j / 2 + 1,
        })
        .collect();
    // An odd number of arms needs the mirrored rows too.
    let rows = if arms.is_multiple_of(2) {
        arms
    } else {
        2 * arms
    };
    let row = round % rows;
    let mut out: Vec<usize> = first.iter().map(|&b| (b + row % arms) % arms).collect();
    if row >= arms {
        out.reverse();
    }
    out
}

/// One round: the baseline and each measured fix alone, in [`order`]'s order for the round.
/// None when stopped (the round is dropped).
fn one_round(
    fixes: &mut [&mut dyn Fix],
    measured: &[usize],
    measure: &mut dyn Measure,
    round: usize,
    stop: &dyn Fn() -> bool,
) -> Result<Option<(Figures, Vec<Figures>)>, String> {
    // Arm 0 is the baseline, arm k + 1 the k-th measured fix.
    let arms = measured.len() + 1;
    let mut got: Vec<Option<Figures>> = vec![None; arms];
    for arm in order(round, arms) {
        if stop() {
            return Ok(None);
        }
        let fix = arm.checked_sub(1).map(|k| measured[k]);
        if let Some(i) = fix {
            fixes[i].set(true)?;
        }
        let block = measure.block(false);
        if let Some(i) = fix {
            fixes[i].set(false)?;
        }
        got[arm] = Some(block?.figures);
    }
    let mut got = got.into_iter().map(|f| f.expect("every arm measured"));
    let base = got.next().expect("the baseline");
    Ok(Some((base, got.collect())))
}

/// Each fix's ratios to the baseline of its round, its effect and whether it is kept.
fn outcomes(
    fixes: &[&mut dyn Fix],
    unmeasured: &[Option<String>],
    baseline: &[Figures],
    blocks: Vec<Vec<Figures>>,
    keep_all: bool,
) -> Vec<Outcome> {
    let ratio = |mine: &[Figures], pick: fn(&Figures) -> f64| {
        let r: Vec<f64> = mine
            .iter()
            .zip(baseline)
            .map(|(m, b)| pick(m) / pick(b).max(1.0))
            .collect();
        Interval::of(&r)
    };
    fixes
        .iter()
        .zip(blocks)
        .enumerate()
        .map(|(i, (f, mine))| {
            let why = unmeasured.get(i).cloned().flatten();
            let p99_ratio = ratio(&mine, |f| f.p99);
            let max_ratio = ratio(&mine, |f| f.max);
            let effect = match (&why, &p99_ratio, &max_ratio) {
                (Some(_), _, _) => Effect::Unmeasured,
                (None, Some(p), Some(m)) => Effect::of(p, m),
                _ => Effect::Unclear,
            };
            Outcome {
                id: f.id().to_string(),
                effect,
                p99_ratio,
                max_ratio,
                kept: keep_all || effect == Effect::Helped,
                unmeasured: why,
                blocks: mine,
            }
        })
        .collect()
}

/// The causes that went away, stayed or came: (kind, before, after), every kind of either.
pub fn compared(before: &Causes, after: &Causes) -> Vec<(String, Tally, Tally)> {
    let mut kinds: Vec<&String> = before.keys().chain(after.keys()).collect();
    kinds.sort();
    kinds.dedup();
    kinds
        .into_iter()
        .map(|k| {
            let get = |c: &Causes| c.get(k).cloned().unwrap_or_default();
            (k.clone(), get(before), get(after))
        })
        .collect()
}

/// A fix made of tune's changes (all of one check id): on writes each change's new value,
/// off its prior one. The first `on` records each change's outcome as `--apply` does; a
/// change that failed then is not written again.
#[derive(Debug)]
pub struct Changes {
    pub id: &'static str,
    pub changes: Vec<Change>,
    root: PathBuf,
    tried: bool,
}

impl Changes {
    /// `changes` grouped by check id, in the order of their first change.
    pub fn grouped(changes: Vec<Change>) -> Vec<Changes> {
        Self::grouped_in(changes, PathBuf::from("/"))
    }

    /// [`Changes::grouped`] for the files under `root`.
    pub fn grouped_in(changes: Vec<Change>, root: PathBuf) -> Vec<Changes> {
        let mut out: Vec<Changes> = Vec::new();
        for c in changes {
            match out.iter_mut().find(|g| g.id == c.id()) {
                Some(g) => g.changes.push(c),
                None => out.push(Changes {
                    id: c.id(),
                    changes: vec![c],
                    root: root.clone(),
                    tried: false,
                }),
            }
        }
        out
    }
}

impl Fix for Changes {
    fn id(&self) -> &str {
        self.id
    }

    fn set(&mut self, on: bool) -> Result<(), String> {
        let first = on && !self.tried;
        self.tried |= on;
        let mut written = 0;
        for c in &mut self.changes {
            if !first && c.error.is_some() {
                continue;
            }
            let value = if on { &c.after } else { &c.before };
            match super::write(&c.knob, &self.root, value) {
                Ok(()) => {
                    written += 1;
                    if first {
                        c.applied = true;
                    }
                }
                Err(e) if first => c.error = Some(e.to_string()),
                // A thread of the process whose slack is measured exited: nothing left to
                // set or take back (later rounds skip it).
                Err(e) if super::is_gone(&c.knob, &e) => {
                    c.error = Some("its thread exited during the run".into())
                }
                Err(e) => return Err(format!("{} {}: {e}", c.id(), c.path.display())),
            }
        }
        // A fix none of whose changes could be made measures as the baseline: unclear, so
        // not kept; its changes carry their errors.
        let _ = written;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
