//! The watched JVMs' probes: HotSpot's USDT probes (safepoints, VM operations, collections,
//! its threads' parks and sleeps), and its clock (`System.nanoTime()`), each a uprobe with
//! rtlab's program.

use super::*;

impl Recorder {
    /// Attaches to the HotSpot probes of `libjvm` (a JVM's libjvm.so, opened as a watched
    /// process maps it) in process `pid`, or with None in every process that maps it (a
    /// file of root's only: its notes say where the probes go): its safepoints, VM
    /// operations, collections, and its threads' parks and sleeps become [`Kind::Jvm`]
    /// events. Returns the probes attached (0: already done, or the file was refused
    /// before); or says why none (a libjvm.so without probes, or no uprobes here).
    pub fn probe_jvm(
        &mut self,
        libjvm: &crate::usdt::Library,
        pid: Option<u32>,
    ) -> Result<usize, crate::usdt::ProbeError> {
        use crate::usdt::ProbeError;
        if pid.is_none() && !libjvm.root_owned {
            return Err(ProbeError::NotRoots(libjvm.shown.clone()));
        }
        let (dev, ino) = libjvm.id;
        let key = (dev, ino, pid.unwrap_or(0));
        // (Probed in every process already: once more in one would record its hits twice.)
        if self.usdt_refused.contains(&(dev, ino))
            || self.usdt_files.contains(&(dev, ino, 0))
            || !self.usdt_files.insert(key)
        {
            return Ok(0);
        }
        let (probes_before, links_before) = (self.usdt.len(), self.usdt_links.len());
        let attached = self.attach_jvm(libjvm, pid);
        if let Err(e) = &attached {
            // All or none: a safepoint's begin without its end would hold delays for ever.
            self.usdt.truncate(probes_before);
            self.usdt_links.truncate(links_before);
            self.usdt_files.remove(&key);
            // A file that cannot be read as a libjvm.so is not read again (another process
            // mapping it would cost as much, for the same answer).
            if e.is_the_files() {
                self.usdt_refused.insert((dev, ino));
            }
        }
        attached
    }

    /// Detaches the probes of JVM processes no longer in `alive` (ended, or out of the watch).
    pub fn forget_jvms(&mut self, alive: &std::collections::HashSet<u32>) {
        let kept = |p: &u32| *p == 0 || alive.contains(p);
        self.usdt_links.retain(|(p, _, _)| kept(p));
        self.clock_links.retain(|(p, _, _)| kept(p));
        self.usdt_files.retain(|(_, _, p)| kept(p));
    }

    fn attach_jvm(
        &mut self,
        libjvm: &crate::usdt::Library,
        pid: Option<u32>,
    ) -> Result<usize, crate::usdt::ProbeError> {
        use crate::usdt::ProbeError;
        let sites = libjvm.sites(&JvmProbe::PROVIDERS)?;
        let wanted: Vec<(JvmProbe, crate::usdt::Site)> = sites
            .into_iter()
            .filter_map(|s| {
                let (p, _) = JvmProbe::ALL.iter().find(|(_, n)| *n == s.name)?;
                (s.semaphore == 0).then_some((*p, s))
            })
            .collect();
        if !wanted.iter().any(|(p, _)| *p == JvmProbe::SafepointBegin)
            || !wanted.iter().any(|(p, _)| *p == JvmProbe::SafepointEnd)
        {
            return Err(ProbeError::NoSafepointProbes(libjvm.shown.clone()));
        }
        let mut attached = 0;
        // A thread's waits only where the watched processes are known (they fire at every
        // wait of every Java thread).
        let watched = self.watched_map.as_ref().map(|m| m.raw_fd());
        for (probe, site) in wanted {
            if probe.of_thread() && watched.is_none() {
                continue;
            }
            let args = probe.kept_args().map(|i| site.args.get(i));
            let filter = watched.filter(|_| probe.of_thread());
            let at = (libjvm, site.offset, false);
            let link = self.attach_uprobe(at, probe, args, filter, pid)?;
            self.usdt_links.push(link);
            attached += 1;
        }
        Ok(attached)
    }

    /// Loads `probe`'s program (recording `args`, for the processes in map `filter` if
    /// given) and attaches it at `offset` in `libjvm` (at the return of the function there
    /// with `ret`), in process `pid` or every process.
    fn attach_uprobe(
        &mut self,
        (libjvm, offset, ret): (&crate::usdt::Library, u64, bool),
        probe: JvmProbe,
        args: [Option<&crate::usdt::Arg>; 2],
        filter: Option<i32>,
        pid: Option<u32>,
    ) -> Result<(u32, Program, OwnedFd), crate::usdt::ProbeError> {
        use crate::usdt::ProbeError;
        let index = self.usdt.len() as u32;
        let insns = usdt_program(index, args, self.maps, filter);
        let prog = Program::load_kprobe(&insns).map_err(|e| {
            let last = e.log.lines().rev().find(|l| !l.trim().is_empty());
            ProbeError::Load {
                probe: probe.name(),
                error: e.error,
                verifier: last.unwrap_or("").to_string(),
            }
        })?;
        // One perf event: its program runs at every hit, on any CPU (the kernel calls a
        // uprobe's programs once per event attached, whatever CPU the event is for: one per
        // CPU would record each hit once per CPU). For one process, the probe is placed in
        // its memory only: other JVMs running the same file pay nothing.
        let cpu = self.next.first().map_or(0, |n| n.0);
        // Through this descriptor: the very file the offsets were read from.
        let path = libjvm.kernel_path();
        let ev = rtlab_sys::perf::uprobe(&path, offset, pid.map(|p| p as i32), cpu, ret)
            .map_err(ProbeError::Attach)?;
        rtlab_sys::perf::attach_bpf(&ev, prog.raw_fd()).map_err(ProbeError::Attach)?;
        self.usdt.push(probe);
        Ok((pid.unwrap_or(0), prog, ev))
    }

    /// Attaches a probe at the clock of `libjvm` (`os::javaTimeNanos`, behind
    /// `System.nanoTime()`) in process `pid`, recording its reads for the watched processes:
    /// where a Java thread reads the time it measures its own lateness with. Every read in
    /// that process then traps (a fraction of a microsecond each), so it is placed in a
    /// process the watch names, never in every process that maps the file. Returns whether
    /// it was attached now (false: it was already, or no set of watched processes).
    pub fn probe_jvm_clock(
        &mut self,
        libjvm: &crate::usdt::Library,
        pid: u32,
    ) -> Result<bool, crate::usdt::ProbeError> {
        let Some(watched) = self.watched_map.as_ref().map(|m| m.raw_fd()) else {
            return Ok(false);
        };
        if self.clock_links.iter().any(|(p, _, _)| *p == pid) {
            return Ok(false);
        }
        let offset = match self.jvm_clocks.get(&libjvm.id) {
            Some(&offset) => offset,
            None => {
                let found = libjvm.function(crate::event::CLOCK_FUNCTION)?;
                self.jvm_clocks.insert(libjvm.id, found);
                found
            }
        };
        let offset =
            offset.ok_or_else(|| crate::usdt::ProbeError::NoClock(libjvm.shown.clone()))?;
        // At its return, with the value it returns (`%rax`): the time the thread read,
        // exactly. (A probe's own time comes after the read: on a VM, the host may stop the
        // vCPU in between, for hundreds of microseconds at times, which the guest does not
        // see. At its entry, that time came before the read, by as much.) Where return
        // probes are refused, at its entry.
        let rax = crate::usdt::Arg::Register {
            regs_offset: crate::usdt::regs_offset("rax").unwrap_or(80),
            size: 8,
        };
        let (probe, filter) = (JvmProbe::ClockRead, Some(watched));
        let link = match self.attach_uprobe(
            (libjvm, offset, true),
            probe,
            [Some(&rax), None],
            filter,
            Some(pid),
        ) {
            Ok(link) => link,
            Err(_) => self.attach_uprobe(
                (libjvm, offset, false),
                probe,
                [None, None],
                filter,
                Some(pid),
            )?,
        };
        self.clock_links.push(link);
        Ok(true)
    }

    /// Removes JVM process `pid`'s clock probe (its reads too frequent to trap); whether
    /// there was one.
    pub fn unprobe_jvm_clock(&mut self, pid: u32) -> bool {
        let before = self.clock_links.len();
        self.clock_links.retain(|(p, _, _)| *p != pid);
        self.clock_links.len() != before
    }

    /// Whether any JVM's probes are attached ([`Recorder::probe_jvm`]).
    pub fn probes_jvm(&self) -> bool {
        !self.usdt.is_empty()
    }

    /// A VM operation's name, at `addr` (`len` bytes) in the memory of thread `tid`'s process
    /// (a string in libjvm.so's data: read once per address).
    pub(super) fn vmop_name(
        &mut self,
        tid: i64,
        addr: u64,
        len: u32,
    ) -> Option<std::sync::Arc<str>> {
        if let Some(n) = self.vmop_names.get(&addr) {
            return Some(n.clone());
        }
        let bytes =
            rtlab_sys::perf::read_process_memory(tid as i32, addr, (len as usize).clamp(1, 128))
                .ok()?;
        let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
        let name: std::sync::Arc<str> = String::from_utf8_lossy(&bytes[..end]).into();
        if self.vmop_names.len() < 4096 {
            self.vmop_names.insert(addr, name.clone());
        }
        Some(name)
    }
}
