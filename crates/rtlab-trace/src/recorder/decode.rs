//! A record decoded into an event: its kind, the tasks and names it refers to, a stack or a
//! JVM probe's meaning.

use super::*;

impl Recorder {
    /// The names the records carry, before any record is decoded: of the tasks that ended
    /// (their earlier events in these records are named by them: their /proc entries are
    /// gone), and of the tasks made or given a new program (a name to fall back on when the
    /// task's /proc entry is gone and its end record not read yet).
    pub(super) fn learn_names(&mut self, records: &[Drained], now_ns: u64) {
        let u32_at =
            |r: &[u8], o: i16| u32::from_ne_bytes(r[o as usize..][..4].try_into().unwrap());
        for r in records.iter().flatten() {
            let kind = u32_at(r, OFF_KIND) as i32;
            if !matches!(kind, K_EXIT | K_FORK | K_EXEC) {
                continue;
            }
            let name = &r[OFF_PID1 as usize..OFF_X as usize];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            let pid = match kind {
                K_FORK => u32_at(r, OFF_A),
                _ => u32_at(r, OFF_CUR),
            };
            if pid == 0 || name.is_empty() {
                continue;
            }
            let name: std::sync::Arc<str> = String::from_utf8_lossy(name).into();
            match kind {
                K_EXIT => self.names.ended(pid as i64, name, now_ns),
                _ => {
                    let ts = u64::from_ne_bytes(r[OFF_TS as usize..][..8].try_into().unwrap());
                    self.names.born(pid as i64, name, ts, now_ns)
                }
            }
        }
    }

    pub(super) fn decode(&mut self, r: &[u8; REC as usize]) -> Option<Event> {
        let u32_at = |o: i16| u32_at(r, o);
        let i32_at = |o: i16| i32_at(r, o);
        let u64_at = |o: i16| u64_at(r, o);
        let cpu = u32_at(OFF_CPU) as u16;
        let kind_code = u32_at(OFF_KIND) as i32;
        // Slots are reused: only the fields this kind wrote are meaningful.
        let current_pid = if matches!(
            kind_code,
            K_SWITCH
                | K_WAKING
                | K_MIGRATE
                | K_LOCK_PI
                | K_LOCK_PI_DONE
                | K_WAIT_ENTER
                | K_WAIT_EXIT
                | K_USDT
        ) {
            u32_at(OFF_CUR) as i64
        } else {
            -1
        };
        let function = (kind_code == K_TIMER).then(|| self.timer_function(u64_at(OFF_X)));
        self.note_stack(r, kind_code, current_pid);
        let mut task = |pid: i64, prio: i64| Task {
            comm: self.comm(pid, cpu),
            pid,
            prio,
        };
        let kind = match kind_code {
            K_SWITCH => Kind::Switch {
                prev: task(current_pid, i32_at(OFF_PRIO1)),
                prev_state: TaskState::from_kernel(u32_at(OFF_A) != 0, u64_at(OFF_X)),
                next: task(i32_at(OFF_PID2), i32_at(OFF_PRIO2)),
            },
            // Where BTF does not say where the task last ran, the waker's CPU stands in (the
            // attribution does not use it).
            K_WAKING => Kind::Waking {
                task: task(i32_at(OFF_PID1), i32_at(OFF_PRIO1)),
                target_cpu: match u32_at(OFF_A) {
                    u32::MAX => cpu,
                    c => c as u16,
                },
            },
            K_MIGRATE => Kind::Migrate {
                task: task(i32_at(OFF_PID1), i32_at(OFF_PRIO1)),
                orig_cpu: cpu,
                dest_cpu: u32_at(OFF_A) as u16,
            },
            K_IRQ_ENTRY => self.irq_entry(u32_at(OFF_A)),
            K_IRQ_EXIT => Kind::IrqExit,
            K_SOFTIRQ_ENTRY => Kind::SoftirqEntry {
                name: SOFTIRQS
                    .get(u32_at(OFF_A) as usize)
                    .map_or_else(|| format!("vec{}", u32_at(OFF_A)), |s| s.to_string()),
            },
            K_SOFTIRQ_EXIT => Kind::SoftirqExit,
            K_TIMER => Kind::HrtimerEntry {
                function: function.unwrap_or_else(|| "?".into()),
                task: (u32_at(OFF_A) == 1).then(|| task(i32_at(OFF_PID1), i32_at(OFF_PRIO1))),
                expires_ns: self.monotonic_expiry(u64_at(OFF_PID2), u64_at(OFF_TS)),
                slack_ns: u32_at(OFF_CUR) as u64,
                // (A sleep timer's slots hold its task instead.)
                timer: Some(u64_at(OFF_PID1)).filter(|&a| a != 0 && u32_at(OFF_A) != 1),
            },
            K_LOCK_PI => Kind::LockPi {
                trylock: u32_at(OFF_A) != 0,
            },
            K_LOCK_PI_DONE => Kind::LockPiDone {
                ret: i32_at(OFF_A) as i32,
            },
            K_WAIT_ENTER => Kind::WaitEnter {
                call: i32_at(OFF_A) as i32,
                deadline_ns: self.wait_deadline(r),
            },
            K_USDT => self.jvm_kind(r, current_pid)?,
            K_WAIT_EXIT => Kind::WaitExit {
                call: i32_at(OFF_A) as i32,
                ret: u64_at(OFF_X) as i64,
            },
            K_NMI => Kind::Nmi {
                handler: self.symbol(u64_at(OFF_PID1)),
                delta_ns: u64_at(OFF_X),
            },
            k if k >= K_VECTOR => {
                let i = ((k - K_VECTOR) / 2) as usize;
                if (k - K_VECTOR) % 2 == 0 {
                    Kind::VectorEntry {
                        name: VECTORS.get(i)?.to_string(),
                    }
                } else {
                    Kind::VectorExit
                }
            }
            _ => return None,
        };
        Some(Event {
            cpu,
            ts_ns: u64_at(OFF_TS),
            current_pid,
            kind,
        })
    }

    /// Keeps the stack the record names to follow its event: the stack the task leaving the
    /// CPU left it with, after a switch (at a waking of a watched thread, the waker's: for a
    /// timer, the interrupted task's).
    pub(super) fn note_stack(&mut self, r: &[u8; REC as usize], kind_code: i32, current_pid: i64) {
        let stack_at = match kind_code {
            K_SWITCH => OFF_PID1,
            K_WAKING if self.own_slots.is_some() => OFF_PID2,
            _ => return,
        };
        if self.stack_map.is_none() {
            return;
        }
        let Ok(id) = u32::try_from(i32_at(r, stack_at)) else {
            return;
        };
        let ts_ns = u64_at(r, OFF_TS);
        self.stacks_seen.insert(id, ts_ns);
        self.stack_after = Some(Event {
            cpu: u32_at(r, OFF_CPU) as u16,
            ts_ns,
            current_pid,
            kind: Kind::Stack {
                task: current_pid,
                id,
            },
        });
    }

    /// An interrupt's entry, named from /proc/interrupts (read again for a number not seen).
    pub(super) fn irq_entry(&mut self, irq: u32) -> Kind {
        if !self.irq_names.contains_key(&irq) {
            self.irq_names = rtlab_sys::procfs::irq_names();
        }
        let name = self.irq_names.get(&irq).cloned();
        Kind::IrqEntry {
            irq,
            name: name.unwrap_or_else(|| "?".into()),
        }
    }

    /// A JVM probe's record: which probe, its process, a VM operation's name, and a park's
    /// relative time (an absolute one is in wall-clock milliseconds) or a clock read's value
    /// (where its probe is at the clock's return).
    pub(super) fn jvm_kind(&mut self, r: &[u8; REC as usize], current_pid: i64) -> Option<Kind> {
        let probe = *self.usdt.get(u32_at(r, OFF_A) as usize)?;
        let name = match probe {
            JvmProbe::VmopBegin | JvmProbe::VmopEnd => {
                self.vmop_name(current_pid, u64_at(r, OFF_X), u32_at(r, OFF_PID2))
            }
            _ => None,
        };
        let time_ns = match probe {
            JvmProbe::ParkBegin => (u32_at(r, OFF_PID2) == 0).then(|| u64_at(r, OFF_X)),
            JvmProbe::ClockRead => Some(u64_at(r, OFF_X)),
            _ => None,
        }
        .filter(|&t| (1..i64::MAX as u64).contains(&t));
        Some(Kind::Jvm {
            probe,
            process: u32_at(r, OFF_PID1),
            name,
            time_ns,
        })
    }

    /// The CLOCK_MONOTONIC time a wait call's entry record asks to wait to (see
    /// [`wait_deadline`]).
    pub(super) fn wait_deadline(&self, r: &[u8; REC as usize]) -> Option<u64> {
        wait_deadline(r, &self.clock_offsets)
    }

    /// A task's name: `swapper/N` for the idle task, else `/proc/<tid>/comm`.
    pub(super) fn comm(&mut self, pid: i64, cpu: u16) -> std::sync::Arc<str> {
        self.names.get(pid, cpu, rtlab_sys::procfs::task_comm)
    }

    /// A timer's expiry `raw` as CLOCK_MONOTONIC time, given that it expired at `ts_ns`: a
    /// timer keeps its expiry in its clock's time (a sleep on CLOCK_REALTIME or CLOCK_TAI, a
    /// relative one on CLOCK_MONOTONIC), and it never expires before it, so the clock is the
    /// one that puts the expiry at most an hour before `ts_ns` (1 ms of slack for the offsets'
    /// drift). None when none does or the recorder could not read it.
    pub(super) fn monotonic_expiry(&self, raw: u64, ts_ns: u64) -> Option<u64> {
        monotonic_expiry(raw, ts_ns, &self.clock_offsets)
    }

    /// The kernel function at or below `addr`.
    /// A timer function's name, shared.
    pub(super) fn timer_function(&mut self, addr: u64) -> std::sync::Arc<str> {
        if let Some(name) = self.timer_functions.get(&addr) {
            return name.clone();
        }
        let name: std::sync::Arc<str> = self.symbol(addr).into();
        self.timer_functions.insert(addr, name.clone());
        name
    }
}
