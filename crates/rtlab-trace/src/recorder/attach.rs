//! Opening the recorder's maps and attaching its programs: the phases of a start, each
//! returning what it made.

use super::*;

/// The recorder's maps, made and mapped: its rings (every task's, and the watched
/// processes' own where `watched` names processes and `by_process` says their records can
/// be told apart), the CPUs traced (`traced` of `cpus`), the set of watched processes, the
/// stacks where asked (`stacks`; said missing where refused).
pub(super) struct Opened {
    pub(super) watched_set: Option<Map>,
    pub(super) heads_map: Map,
    pub(super) slots_map: Map,
    pub(super) own_slots_map: Option<Map>,
    pub(super) stack_map: Option<Map>,
    pub(super) cpus_map: Map,
    pub(super) heads: MappedArray,
    pub(super) slots: MappedArray,
    pub(super) own_slots: Option<MappedArray>,
    pub(super) maps: Maps,
    pub(super) missing: Vec<crate::error::Missing>,
}

pub(super) fn open_maps(
    cpus: &[usize],
    traced: &CpuMask,
    sizes: Rings,
    (watched, by_process, stacks): (bool, bool, bool),
) -> Result<Opened, TraceError> {
    let rings = cpus.len().max(1) as u32;
    let entries = cpus.last().map_or(1, |&c| c as u32 + 1);
    let sys = TraceError::Sys;
    // The watched processes (their wait calls, and their rings of their own).
    let watched_set = match watched {
        true => Some(Map::hash(4, 1, MAX_WATCHED).map_err(sys)?),
        false => None,
    };
    let own = watched_set.is_some() && by_process;
    let heads_map = Map::array(HEAD_BYTES, rings * (1 + own as u32), true).map_err(sys)?;
    let slots_map = Map::array(REC as u32, rings * sizes.slots, true).map_err(sys)?;
    let mut missing = Vec::new();
    let stack_map = match stacks {
        true => match Map::stack_trace(STACK_DEPTH, STACK_ENTRIES) {
            Ok(m) => Some(m),
            Err(e) => {
                missing.push(crate::error::Missing::Stacks(e.to_string()));
                None
            }
        },
        false => None,
    };
    let own_slots_map = match own {
        true => Some(Map::array(REC as u32, rings * sizes.own_slots, true).map_err(sys)?),
        false => None,
    };
    let cpus_map = Map::array(CPU_ENTRY, entries, false).map_err(sys)?;
    for (ring, &cpu) in cpus.iter().enumerate() {
        cpus_map
            .update(cpu as u32, &cpu_entry(traced.contains(cpu), ring))
            .map_err(sys)?;
    }
    let heads = heads_map.map_read().map_err(sys)?;
    let maps = Maps {
        cpus: cpus_map.raw_fd(),
        heads: heads_map.raw_fd(),
        slots: slots_map.raw_fd(),
        own: match (&watched_set, &own_slots_map) {
            (Some(w), Some(s)) => Some(OwnRings {
                watched: w.raw_fd(),
                slots: s.raw_fd(),
                rings,
                size: sizes.own_slots,
            }),
            _ => None,
        },
        size: sizes.slots,
        stacks: stack_map.as_ref().map(Map::raw_fd),
    };
    let slots = slots_map.map_read().map_err(sys)?;
    let own_slots = match &own_slots_map {
        Some(m) => Some(m.map_read().map_err(sys)?),
        None => None,
    };
    Ok(Opened {
        watched_set,
        heads_map,
        slots_map,
        own_slots_map,
        stack_map,
        cpus_map,
        heads,
        slots,
        own_slots,
        maps,
        missing,
    })
}

/// What the recorder's programs attached, and what could not be recorded (and why): the one
/// collector of [`Recorder::start_with`]'s phases.
#[derive(Default)]
pub(super) struct Attached {
    pub(super) programs: Vec<Program>,
    pub(super) links: Vec<OwnedFd>,
    pub(super) missing: Vec<crate::error::Missing>,
}

impl Attached {
    pub(super) fn extend(&mut self, attached: impl IntoIterator<Item = (Program, OwnedFd)>) {
        for (p, link) in attached {
            self.programs.push(p);
            self.links.push(link);
        }
    }
}

/// Loads and attaches a program on each scheduler, interrupt and timer tracepoint
/// ([`probes`]): typed (BTF) where the kernel allows, else raw. Returns whether the timer
/// program names the sleeper each sleep timer wakes. A kernel without `sched_switch` as
/// expected cannot be recorded at all; any other event missing is said.
pub(super) fn attach_scheduler_probes(
    btf: &Btf,
    offsets: &TaskOffsets,
    maps: Maps,
    wakings: bool,
    att: &mut Attached,
) -> Result<bool, TraceError> {
    let mut names_sleepers = false;
    for probe in probes() {
        if probe.kind == K_WAKING && !wakings && names_sleepers {
            continue;
        }
        // The prototype's first parameter is the context.
        let proto = btf.typedef_fn_params(&format!("btf_trace_{}", probe.tracepoint));
        // (sched_process_exit has a second parameter, group_dead, on newer kernels.)
        let also_fits = probe.kind == K_EXIT && proto == Some(probe.args + 2);
        if proto != Some(probe.args + 1) && !also_fits {
            if probe.kind == K_SWITCH {
                return Err(TraceError::Unsupported(format!(
                    "sched_switch has an unexpected prototype on this kernel ({proto:?} parameters)"
                )));
            }
            att.missing
                .push(crate::error::Missing::Event(probe.tracepoint));
            continue;
        }
        let typed = btf
            .typedef_id(&format!("btf_trace_{}", probe.tracepoint))
            .and_then(|id| {
                let load = |o: &TaskOffsets| {
                    let insns = program(&probe, o, maps, true);
                    Program::load_btf_raw_tracepoint(&insns, id).ok()
                };
                // Naming sleepers needs the kfunc; without it, the function alone.
                let plain = TaskOffsets {
                    sleeper: None,
                    ..*offsets
                };
                match load(offsets) {
                    Some(p) => Some((p, offsets.sleeper.is_some())),
                    None => load(&plain).map(|p| (p, false)),
                }
            });
        let (prog, name) = match typed {
            Some((p, sleepers)) => {
                if probe.kind == K_TIMER {
                    names_sleepers = sleepers;
                }
                (p, None)
            }
            None => {
                let insns = program(&probe, offsets, maps, false);
                let p = Program::load_raw_tracepoint(&insns).map_err(|e| {
                    let last = e
                        .log
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("");
                    TraceError::Program(format!("{} ({}): {}", e.error, probe.tracepoint, last))
                })?;
                (p, Some(probe.tracepoint.as_str()))
            }
        };
        match prog.attach_raw_tracepoint(name) {
            Ok(link) => att.links.push(link),
            Err(e) if probe.kind == K_SWITCH => return Err(TraceError::Sys(e)),
            Err(_) => {
                if probe.kind == K_TIMER {
                    names_sleepers = false;
                }
                att.missing
                    .push(crate::error::Missing::Event(probe.tracepoint))
            }
        }
        att.programs.push(prog);
    }
    Ok(names_sleepers)
}

/// A watch's probes: its threads' PI lock waits (`locks`), its processes' children from their
/// start (`follow_forks`), its threads' wait calls (`wait_calls`, through `watched_set`).
/// Returns how lock waits are recorded (if they are), the set of watched processes (kept
/// even where the wait calls could not be probed: their switches and wakeups still go to
/// their rings) and whether their wait calls are recorded.
pub(super) fn attach_watch_probes(
    (btf, offsets, maps): (&Btf, &TaskOffsets, Maps),
    watched_set: Option<Map>,
    (locks, follow_forks, wait_calls): (LockWaits, bool, bool),
    att: &mut Attached,
) -> (Option<LockProbes>, Option<Map>, bool) {
    let mut lock_probes = None;
    if locks != LockWaits::No {
        match attach_lock_probes(btf, maps, locks == LockWaits::Any) {
            Ok((how, attached)) => {
                lock_probes = Some(how);
                att.extend(attached);
            }
            Err(why) => att
                .missing
                .push(crate::error::Missing::LockWaits(why.to_string())),
        }
    }
    // The wait calls of the threads [`Recorder::set_watched`] names.
    let mut watched_map = None;
    let mut records_waits = false;
    if let (Some(set), Some(tgid), true) = (&watched_set, offsets.tgid, follow_forks) {
        match attach_fork_probe(btf, set.raw_fd(), tgid) {
            Ok(one) => att.extend([one]),
            Err(why) => att
                .missing
                .push(crate::error::Missing::Children(why.to_string())),
        }
    }
    if let Some(set) = watched_set {
        let attached = match wait_calls {
            true => attach_wait_probes(btf, maps, set.raw_fd()),
            false => Ok(Vec::new()),
        };
        match attached {
            Ok(attached) => {
                att.extend(attached);
                watched_map = Some(set);
                records_waits = wait_calls;
            }
            // The map stays: the switches and wakeups of the watched processes still go
            // to their rings.
            Err(why) => {
                att.missing
                    .push(crate::error::Missing::WaitCalls(why.to_string()));
                watched_map = Some(set);
            }
        }
    }
    (lock_probes, watched_map, records_waits)
}
