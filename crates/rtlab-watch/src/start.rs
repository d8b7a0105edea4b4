//! Starting a watch, and the watch as the reader sees it ([`Watcher`]): the events offered,
//! the delays asked about, the event source kept following the watched threads.

use crate::{WatchSpec, WatchState};
use rtlab_stats::result::Outlier;
use rtlab_trace::event::Event;
use rtlab_trace::watcher::{Probes, Wants, Watcher};
use rtlab_trace::{Explainer, Options, Request, TraceError};
use std::sync::{Arc, Mutex};

/// Starts watching `spec`'s threads on `cpus` (every CPU they may run on): their delays are
/// measured from the events, and those over the threshold explained. Unless
/// `options.reader_cpus` says otherwise, the reader runs on the CPUs of `cpus` the watched
/// threads may not run on, if any. Returns the explainer and the watch's state.
pub fn start(
    cpus: &[usize],
    mut options: Options,
    spec: WatchSpec,
) -> Result<(Explainer, Arc<Mutex<WatchState>>), TraceError> {
    let mut state = WatchState::new(spec);
    // Unless told where, the reader keeps off the watched threads' CPUs, and follows them:
    // those they may not run on where there are any (a real-time program usually has CPUs of
    // its own; the rest do the housekeeping), else those their real-time threads do not run
    // on. So does this setup: its maps and programs are made in the kernel, and a thread
    // woken on the same CPU of a kernel that is not fully preemptible waits for each.
    let mut setup_cpus = None;
    if options.reader_cpus.is_empty() {
        state.let_reader_follow(cpus);
        let now = rtlab_sys::time::monotonic_now_ns();
        if let Some(spare) = state
            .reader_cpus(now)
            .filter(|spare| spare.len() < cpus.len())
        {
            setup_cpus = Some(spare.clone());
            options.reader_cpus = spare;
        }
    }
    let state = Arc::new(Mutex::new(state));
    let watcher: Arc<Mutex<dyn Watcher>> = state.clone();
    let setup = move || Explainer::start_watching(cpus, options, watcher);
    let explainer = match setup_cpus {
        // In a thread of its own there, which changes no other thread's affinity (the
        // caller's, which a command it starts would inherit).
        Some(spare) => std::thread::scope(|s| {
            s.spawn(move || {
                let _ = rtlab_sys::affinity::set_current_thread_affinity(
                    &rtlab_sys::affinity::CpuList::from(spare),
                );
                setup()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        }),
        None => setup(),
    }?;
    Ok((explainer, state))
}

impl Watcher for WatchState {
    fn wants(&self) -> Wants {
        Wants {
            locks: self.spec().locks,
            cpus: self.cpus_wanted().cloned(),
            wait_calls: self.spec().user_view,
            follow_forks: self.follows_children(),
            processes: self.watched_processes(),
        }
    }

    fn offer(&mut self, e: &Event) {
        WatchState::offer(self, e);
    }

    fn drained(&mut self, drained_at: u64, stopping: bool, ask: &mut dyn FnMut(Request)) {
        match stopping {
            true => self.flush(ask),
            false => self.advance(drained_at, ask),
        }
    }

    fn follow(&mut self, source: &mut dyn Probes) {
        for (lib, pid) in self.take_jvm_libraries() {
            let attached = source.probe_jvm(&lib, pid);
            let refused = attached.as_ref().is_err_and(|e| e.not_permitted());
            if let Err(rtlab_trace::usdt::ProbeError::NoSafepointProbes(_)) = &attached {
                // Its own log tells of its safepoints instead.
                self.jvms.without_probes(lib.id, pid);
            }
            let waits = source.takes_watched();
            self.jvm_probed(&lib, attached, waits);
            // Its clock, in that process only (every read traps).
            if let (Some(pid), true, false) = (pid, self.java_clock(), refused) {
                if let Some(clock) = source.probe_jvm_clock(&lib, pid) {
                    self.jvm_clock_probed(&lib, pid, clock);
                }
            }
        }
        for pid in self.take_clocks_to_remove() {
            source.unprobe_jvm_clock(pid);
        }
        if self.threads_generation() != self.handed {
            self.handed = self.threads_generation();
            let waits = source.set_watched(&self.watched_processes());
            if source.takes_watched() {
                self.set_wait_calls(waits);
            }
        }
        let traced = source.trace_cpus(self.cpus_wanted());
        self.set_traced(&traced);
    }

    fn reader_cpus(&self, now_ns: u64) -> Option<Vec<usize>> {
        WatchState::reader_cpus(self, now_ns)
    }

    fn series_name(&self, index: u16) -> Option<String> {
        self.series().get(index as usize).map(|s| s.name.clone())
    }

    fn explained(&mut self, series: u16, o: Outlier) {
        WatchState::explained(self, series, o);
    }

    fn just_attached(&self, now_ns: u64) -> bool {
        WatchState::just_attached(self, now_ns)
    }

    fn logged_stops(
        &self,
        tid: i64,
        from_ns: u64,
        to_ns: u64,
    ) -> rtlab_trace::watcher::LoggedStops {
        let process =
            (self.thread_process.get(&tid).copied()).or_else(|| rtlab_sys::procfs::process_of(tid));
        process.map_or_else(Default::default, |p| {
            self.jvms.logged_over(p, (from_ns, to_ns))
        })
    }

    fn held_from(&self) -> u64 {
        (self.held_requests.iter())
            .map(|(_, r)| r.deadline_ns)
            .min()
            .unwrap_or(u64::MAX)
    }
}
