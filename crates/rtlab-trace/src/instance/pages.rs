//! The instance's events as the kernel keeps them: each CPU's ring buffer read a page at a
//! time from `per_cpu/cpuN/trace_pipe_raw`, and each record decoded with the layout its
//! event's `format` file gives. `trace_pipe` gives the same events as text, which the kernel
//! formats inside each read (and rtlab parsed back): beside a storm of context switches, a
//! CPU making some 300 000 events a second outran that reader, and the kernel overwrote
//! what it had not read. A page is copied, not formatted, and holds about a hundred events.

use crate::error::TraceError;
use crate::event::{Event, JvmProbe, Kind, Task, TaskState, SOFTIRQS};
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A page's `commit` word: the bytes of events in it, and two flags the reader's copy sets
/// (the kernel's `RB_MISSED_EVENTS`, `RB_MISSED_STORED`): events were lost before this page,
/// and their count is stored right after its events.
const COMMIT_SIZE_MASK: u64 = (1 << 27) - 1;
const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;
/// A record's `type_len` (its header's low 5 bits): padding, a time extension, an absolute
/// time; 1-28 is a data record's length in 4-byte words, 0 a longer one's (in the next word).
const PADDING: u32 = 29;
const TIME_EXTEND: u32 = 30;
const TIME_STAMP: u32 = 31;
/// An absolute time record keeps the low 59 bits; the rest come from the page's time.
const TS_MSB: u64 = 0xf8 << 56;
/// `sched_switch`'s `prev_state` when the task was preempted (the kernel's `TASK_REPORT_MAX`).
const PREEMPTED_STATE: i64 = 0x100;
/// The kernel's `ENODEV`: a read of a CPU's pipe that has no ring buffer.
const ENODEV: i32 = 19;
/// Task names kept for sharing at most (a few MiB).
const MAX_NAMES: usize = 65_536;
/// Pages read from one CPU per poll, so one CPU's flood does not keep the others waiting.
pub(crate) const PAGES_PER_POLL: usize = 64;

/// How a field's bytes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Int {
        signed: bool,
    },
    /// `char name[N]`.
    Chars,
    /// `__data_loc char[] name`: a word with the string's offset (low 16 bits) and length.
    DataLoc,
    /// `__rel_loc char[] name`: the same, the offset from the end of the word.
    RelLoc,
}

/// A field of an event's record, as its format file gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    offset: usize,
    size: usize,
    shape: Shape,
}

impl Field {
    fn int(&self, p: &[u8]) -> Option<i64> {
        let b = p.get(self.offset..self.offset + self.size)?;
        let signed = matches!(self.shape, Shape::Int { signed: true });
        Some(match self.size {
            1 if signed => b[0] as i8 as i64,
            1 => b[0] as i64,
            2 if signed => i16::from_ne_bytes(b.try_into().ok()?) as i64,
            2 => u16::from_ne_bytes(b.try_into().ok()?) as i64,
            4 if signed => i32::from_ne_bytes(b.try_into().ok()?) as i64,
            4 => u32::from_ne_bytes(b.try_into().ok()?) as i64,
            8 => i64::from_ne_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }

    /// A string field's bytes, up to its first NUL.
    fn text<'p>(&self, p: &'p [u8]) -> Option<&'p [u8]> {
        let b = match self.shape {
            Shape::Chars => p.get(self.offset..self.offset + self.size)?,
            Shape::DataLoc | Shape::RelLoc => {
                let word = self.int(p)? as u32;
                let (at, len) = ((word & 0xffff) as usize, (word >> 16) as usize);
                let at = match self.shape {
                    Shape::RelLoc => self.offset + self.size + at,
                    _ => at,
                };
                p.get(at..at + len)?
            }
            Shape::Int { .. } => return None,
        };
        Some(&b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())])
    }
}

/// An event's `format` file: its name, id and fields.
#[derive(Debug, Default)]
struct Format {
    name: String,
    id: Option<u16>,
    fields: HashMap<String, Field>,
}

impl Format {
    /// Parses `name: ...`, `ID: ...` and each `field:TYPE NAME; offset:N; size:N; signed:N;`.
    fn parse(text: &str) -> Format {
        let mut f = Format::default();
        for line in text.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix("name:") {
                f.name = name.trim().to_string();
            } else if let Some(id) = line.strip_prefix("ID:") {
                f.id = id.trim().parse().ok();
            } else if let Some((name, field)) = parse_field(line) {
                f.fields.insert(name, field);
            }
        }
        f
    }

    fn get(&self, name: &str) -> Option<Field> {
        self.fields.get(name).copied()
    }

    /// The fields naming a task: `{prefix}comm`, `{prefix}pid`, `{prefix}prio`.
    fn task(&self, prefix: &str) -> Option<[Field; 3]> {
        let get = |n: &str| self.get(&format!("{prefix}{n}"));
        Some([get("comm")?, get("pid")?, get("prio")?])
    }
}

fn parse_field(line: &str) -> Option<(String, Field)> {
    let rest = line.strip_prefix("field:")?;
    let mut parts = rest.split(';').map(str::trim);
    let decl = parts.next()?;
    let mut value = |key: &str| -> Option<usize> { parts.next()?.strip_prefix(key)?.parse().ok() };
    let (offset, size) = (value("offset:")?, value("size:")?);
    let signed = value("signed:").unwrap_or(0) != 0;
    let (ty, name) = decl.rsplit_once(|c: char| c.is_whitespace())?;
    let (name, array) = match name.split_once('[') {
        Some((n, _)) => (n, true),
        None => (name, false),
    };
    let shape = if ty.starts_with("__data_loc") {
        Shape::DataLoc
    } else if ty.starts_with("__rel_loc") {
        Shape::RelLoc
    } else if array {
        Shape::Chars
    } else {
        Shape::Int { signed }
    };
    Some((
        name.to_string(),
        Field {
            offset,
            size,
            shape,
        },
    ))
}

/// What an event's record becomes, with the fields it is read from.
#[derive(Debug, Clone)]
enum Layout {
    Switch {
        prev: [Field; 3],
        state: Field,
        next: [Field; 3],
    },
    Waking {
        task: [Field; 3],
        target_cpu: Field,
    },
    Migrate {
        task: [Field; 3],
        orig: Field,
        dest: Field,
    },
    IrqEntry {
        irq: Field,
        name: Field,
    },
    IrqExit,
    SoftirqEntry {
        vec: Field,
    },
    SoftirqExit,
    VectorEntry(String),
    VectorExit,
    Nmi {
        handler: Field,
        delta: Field,
    },
    Jvm {
        probe: JvmProbe,
        op: Option<Field>,
    },
}

impl Layout {
    /// The layout of an event this source enables (by its name), `None` for any other or
    /// one whose fields are not where this kernel's format says.
    fn of(f: &Format) -> Option<Layout> {
        Some(match f.name.as_str() {
            "sched_switch" => Layout::Switch {
                prev: f.task("prev_")?,
                state: f.get("prev_state")?,
                next: f.task("next_")?,
            },
            "sched_waking" => Layout::Waking {
                task: f.task("")?,
                target_cpu: f.get("target_cpu")?,
            },
            "sched_migrate_task" => Layout::Migrate {
                task: f.task("")?,
                orig: f.get("orig_cpu")?,
                dest: f.get("dest_cpu")?,
            },
            "irq_handler_entry" => Layout::IrqEntry {
                irq: f.get("irq")?,
                name: f.get("name")?,
            },
            "irq_handler_exit" => Layout::IrqExit,
            "softirq_entry" => Layout::SoftirqEntry { vec: f.get("vec")? },
            "softirq_exit" => Layout::SoftirqExit,
            "nmi_handler" => Layout::Nmi {
                handler: f.get("handler")?,
                delta: f.get("delta_ns")?,
            },
            // A JVM's probe through a uprobe event (`hotspot_<probe>_<n>`).
            n if n.starts_with("hotspot_") => {
                let probe_name = n["hotspot_".len()..].rsplit_once('_')?.0;
                let (probe, _) = JvmProbe::ALL.iter().find(|(_, p)| *p == probe_name)?;
                Layout::Jvm {
                    probe: *probe,
                    op: f.get("op"),
                }
            }
            n if n.ends_with("_entry") && !n.starts_with("hrtimer") => {
                Layout::VectorEntry(n.trim_end_matches("_entry").to_string())
            }
            n if n.ends_with("_exit") && !n.starts_with("hrtimer") => Layout::VectorExit,
            _ => return None,
        })
    }
}

/// Where a page's time, its `commit` word and its records are (`events/header_page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PageHeader {
    ts: usize,
    commit: usize,
    commit_size: usize,
    data: usize,
}

impl Default for PageHeader {
    fn default() -> Self {
        PageHeader {
            ts: 0,
            commit: 8,
            commit_size: 8,
            data: 16,
        }
    }
}

impl PageHeader {
    fn parse(text: &str) -> PageHeader {
        let f = Format::parse(text);
        let d = PageHeader::default();
        PageHeader {
            ts: f.get("timestamp").map_or(d.ts, |f| f.offset),
            commit: f.get("commit").map_or(d.commit, |f| f.offset),
            commit_size: f.get("commit").map_or(d.commit_size, |f| f.size),
            data: f.get("data").map_or(d.data, |f| f.offset),
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// What a page says before its records: events were lost just before it (how many, where
/// the kernel had room to say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missed {
    None,
    Counted(u64),
    Uncounted,
}

/// What a page copied from a ring buffer says of events lost just before it.
fn page_missed(page: &[u8], h: &PageHeader) -> Missed {
    let (commit, size) = page_commit(page, h);
    match (commit & MISSED_EVENTS != 0, commit & MISSED_STORED != 0) {
        (false, _) => Missed::None,
        (true, true) => page
            .get(h.data..)
            .and_then(|data| u64_at(data, size))
            .map_or(Missed::Uncounted, Missed::Counted),
        (true, false) => Missed::Uncounted,
    }
}

/// A page's `commit` word, and the bytes of records it says the page holds.
fn page_commit(page: &[u8], h: &PageHeader) -> (u64, usize) {
    let commit = page.get(h.commit..).and_then(|c| match h.commit_size {
        4 => u32_at(c, 0).map(u64::from),
        _ => u64_at(c, 0),
    });
    let commit = commit.unwrap_or(0);
    let room = page.len().saturating_sub(h.data);
    (commit, ((commit & COMMIT_SIZE_MASK) as usize).min(room))
}

/// Walks one page copied from a ring buffer: `f(time, record)` for each data record in
/// order, the times as the kernel's own reader makes them (the page's time plus each
/// record's delta; a padding record's delta is not the clock's).
fn walk_page(page: &[u8], h: &PageHeader, f: &mut dyn FnMut(u64, &[u8])) {
    let Some(mut ts) = u64_at(page, h.ts) else {
        return;
    };
    let (_, size) = page_commit(page, h);
    let data = &page.get(h.data..).unwrap_or_default()[..size];
    let mut at = 0;
    while let Some(head) = u32_at(data, at) {
        let (type_len, delta) = (head & 31, (head >> 5) as u64);
        let word = u32_at(data, at + 4).map(u64::from);
        match type_len {
            // The rest of the page is padding, or a record removed after it was written.
            PADDING => match word {
                Some(len) if delta != 0 && len > 0 => at += 4 + len as usize,
                _ => break,
            },
            TIME_EXTEND => {
                ts += (word.unwrap_or(0) << 27) + delta;
                at += 8;
            }
            TIME_STAMP => {
                ts = ((word.unwrap_or(0) << 27) | delta) | (ts & TS_MSB);
                at += 8;
            }
            0 => {
                let Some(len) = word.filter(|&l| l >= 4) else {
                    break;
                };
                ts += delta;
                let len = len as usize - 4;
                let start = at + 8;
                f(ts, &data[start.min(size)..(start + len).min(size)]);
                at = start + len.next_multiple_of(4);
            }
            words => {
                ts += delta;
                let start = at + 4;
                let len = words as usize * 4;
                f(ts, &data[start.min(size)..(start + len).min(size)]);
                at = start + len;
            }
        }
    }
}

/// One CPU's raw pipe and how far it was read.
#[derive(Debug)]
struct CpuPipe {
    cpu: u16,
    file: std::fs::File,
    /// Every event of this CPU written before this time was read (or counted lost): the
    /// newest event's, or the time a read began that found the ring empty.
    read_ns: u64,
    /// When the last read that found the ring empty began.
    emptied_at: u64,
}

/// Every CPU's ring buffer of a tracefs instance, read raw.
#[derive(Debug)]
pub(crate) struct Pages {
    dir: PathBuf,
    cpus: Vec<CpuPipe>,
    header: PageHeader,
    buf: Vec<u8>,
    /// By event id.
    layouts: Vec<Option<Arc<Layout>>>,
    /// Ids looked up in the instance's events and found to be none of the known.
    unknown: HashSet<u16>,
    common_pid: Field,
    /// Task names as the events gave them, shared (the history keeps a million events, each
    /// naming two tasks).
    names: HashMap<i64, Arc<str>>,
    /// Kernel text symbols, read at the first NMI (its handler is an address).
    symbols: Option<Vec<(u64, String)>>,
}

impl Pages {
    /// The raw pipes of instance `dir`'s CPUs `cpus` (the traced ones: a CPU offline when the
    /// instance was made has no ring to read), and the layouts of the events in `events`
    /// (category/name) this kernel has; with the events enabled whose records it cannot
    /// decode here (a field renamed or retyped by this kernel).
    pub(crate) fn open(
        dir: &Path,
        cpus: &[usize],
        events: &[&str],
    ) -> Result<(Pages, Vec<String>), TraceError> {
        let mut files = Vec::new();
        for &cpu in cpus {
            let path = dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
            let file =
                rtlab_sys::fs::open_nonblocking(&path).map_err(|e| TraceError::io(&path, e))?;
            files.push((cpu as u16, file));
        }
        let mut pages = Pages::over(dir, files);
        pages.header = std::fs::read_to_string(dir.join("events/header_page"))
            .map(|t| PageHeader::parse(&t))
            .unwrap_or_default();
        let subbuf_kb = std::fs::read_to_string(dir.join("buffer_subbuf_size_kb"))
            .ok()
            .and_then(|t| t.trim().parse::<usize>().ok())
            .unwrap_or(4);
        // A read gives one page, whole when the buffer holds one: room for the largest page
        // a kernel without this file may use (64 KiB, its page size on some arm64 kernels).
        pages.buf = vec![0; (subbuf_kb * 1024).max(64 * 1024)];
        let mut undecodable = Vec::new();
        for ev in events {
            let format = dir.join("events").join(ev).join("format");
            if format.exists() && pages.learn(&format).is_none() {
                undecodable.push(ev.to_string());
            }
        }
        Ok((pages, undecodable))
    }

    /// Pages read from `files` (CPU, file): no layouts known yet.
    pub(crate) fn over(dir: &Path, mut files: Vec<(u16, std::fs::File)>) -> Pages {
        files.sort_by_key(|(c, _)| *c);
        Pages {
            dir: dir.to_path_buf(),
            cpus: files
                .into_iter()
                .map(|(cpu, file)| CpuPipe {
                    cpu,
                    file,
                    read_ns: 0,
                    emptied_at: 0,
                })
                .collect(),
            header: PageHeader::default(),
            buf: vec![0; 4096],
            layouts: Vec::new(),
            unknown: HashSet::new(),
            common_pid: Field {
                offset: 4,
                size: 4,
                shape: Shape::Int { signed: true },
            },
            names: HashMap::new(),
            symbols: None,
        }
    }

    /// Reads an event's format file and keeps its layout by id; whether it is one.
    fn learn(&mut self, path: &Path) -> Option<u16> {
        let f = Format::parse(&std::fs::read_to_string(path).ok()?);
        let (id, layout) = (f.id?, Layout::of(&f)?);
        if let Some(pid) = f.get("common_pid") {
            self.common_pid = pid;
        }
        let i = id as usize;
        if self.layouts.len() <= i {
            self.layouts.resize(i + 1, None);
        }
        self.layouts[i] = Some(Arc::new(layout));
        Some(id)
    }

    /// An id not met before: a JVM's uprobe event defined since the start (in this run's
    /// group), or none of this source's.
    fn learn_id(&mut self, id: u16) {
        let group = self.dir.join("events").join(super::uprobe_group());
        let found = std::fs::read_dir(&group)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let text = std::fs::read_to_string(e.path().join("id")).unwrap_or_default();
                text.trim().parse() == Ok(id) && self.learn(&e.path().join("format")) == Some(id)
            });
        if !found {
            self.unknown.insert(id);
        }
    }

    /// The run's uprobe events changed (a JVM's probes defined, or taken back): ids are
    /// looked up again (the kernel hands a removed event's id to the next one).
    pub(crate) fn uprobes_changed(&mut self) {
        self.unknown.clear();
        for l in &mut self.layouts {
            if l.as_deref()
                .is_some_and(|l| matches!(l, Layout::Jvm { .. }))
            {
                *l = None;
            }
        }
    }

    /// Where every CPU's events were all read up to.
    pub(crate) fn read_through(&self) -> u64 {
        self.cpus
            .iter()
            .map(|p| p.read_ns)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// When `cpu`'s events were all read up to; `u64::MAX` for a CPU it has no pipe of.
    pub(crate) fn read_until(&self, cpu: u16) -> u64 {
        self.cpus
            .binary_search_by_key(&cpu, |p| p.cpu)
            .map_or(u64::MAX, |i| self.cpus[i].read_ns)
    }

    /// Reads each CPU's new pages (at most [`PAGES_PER_POLL`] each) and hands their events
    /// to `f`, a loss (`Kind::Lost`) just after the last event read before it; returns how
    /// many CPUs it left pages unread on (0: every ring was read to empty).
    pub(crate) fn poll(&mut self, f: &mut dyn FnMut(Event)) -> Result<usize, TraceError> {
        let mut behind = 0;
        for i in 0..self.cpus.len() {
            let mut emptied = false;
            for _ in 0..PAGES_PER_POLL {
                let asked = rtlab_sys::time::monotonic_now_ns();
                let got = match self.cpus[i].file.read(&mut self.buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    // (ENODEV: a CPU with no ring, offline when the instance was made.)
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.raw_os_error() == Some(ENODEV) =>
                    {
                        0
                    }
                    Err(e) => return Err(TraceError::Pipe(e)),
                };
                if got == 0 {
                    // Empty: everything written before the previous empty read was read. (Not
                    // before this one: a record's time is taken when it is reserved, and an
                    // interrupt, or the host stopping the vCPU, may delay its commit.)
                    let p = &mut self.cpus[i];
                    p.read_ns = p.read_ns.max(p.emptied_at);
                    p.emptied_at = asked;
                    emptied = true;
                    break;
                }
                self.page(i, got, f);
            }
            behind += usize::from(!emptied);
        }
        Ok(behind)
    }

    /// The page in `buf[..len]`, of the `i`-th CPU.
    fn page(&mut self, i: usize, len: usize, f: &mut dyn FnMut(Event)) {
        let buf = std::mem::take(&mut self.buf);
        let (cpu, header) = (self.cpus[i].cpu, self.header);
        let missed = page_missed(&buf[..len], &header);
        let mut lost = (missed != Missed::None).then(|| Pages::lost_count(missed));
        // The loss sits just after the last event read before it (and before this page's
        // first), as the eBPF recorder places its own.
        let lost_event = |n: u64, after: u64, before: u64| Event {
            cpu,
            ts_ns: (after + 1).min(before.saturating_sub(1)).max(1),
            current_pid: -1,
            kind: Kind::Lost(n),
        };
        walk_page(&buf[..len], &header, &mut |ts, r| {
            let p = &mut self.cpus[i];
            if let Some(n) = lost.take() {
                f(lost_event(n, p.read_ns, ts));
            }
            p.read_ns = p.read_ns.max(ts);
            if let Some(e) = self.decode(cpu, ts, r) {
                f(e);
            }
        });
        if let Some(n) = lost {
            f(lost_event(n, self.cpus[i].read_ns, u64::MAX));
        }
        self.buf = buf;
    }

    /// How many were lost before a page that says some were: its count, or where the page
    /// had no room for it, at least one (the run's total is the kernel's own count).
    fn lost_count(missed: Missed) -> u64 {
        match missed {
            Missed::Counted(n) => n.max(1),
            _ => 1,
        }
    }

    fn name(&mut self, pid: i64, comm: &[u8]) -> Arc<str> {
        match self.names.get(&pid) {
            Some(n) if n.as_bytes() == comm => n.clone(),
            _ => {
                // (Bounded: a machine that starts tasks all day would grow it for ever.)
                if self.names.len() >= MAX_NAMES {
                    self.names.clear();
                }
                let n: Arc<str> = String::from_utf8_lossy(comm).into();
                self.names.insert(pid, n.clone());
                n
            }
        }
    }

    fn task(&mut self, r: &[u8], [comm, pid, prio]: [Field; 3]) -> Option<Task> {
        let pid = pid.int(r)?;
        Some(Task {
            comm: self.name(pid, comm.text(r)?),
            pid,
            prio: prio.int(r)?,
        })
    }

    fn symbol(&mut self, addr: u64) -> String {
        let symbols = self
            .symbols
            .get_or_insert_with(rtlab_sys::procfs::kernel_text_symbols);
        let i = symbols.partition_point(|(a, _)| *a <= addr);
        match i.checked_sub(1).and_then(|i| symbols.get(i)) {
            Some((_, name)) => name.clone(),
            None => format!("{addr:#x}"),
        }
    }

    /// Record `r` of `cpu` at `ts_ns` as an event; `None` for one of no known layout.
    fn decode(&mut self, cpu: u16, ts_ns: u64, r: &[u8]) -> Option<Event> {
        let id = u16::from_ne_bytes(r.get(..2)?.try_into().ok()?);
        let layout = match self.layouts.get(id as usize) {
            Some(Some(l)) => l.clone(),
            _ if self.unknown.contains(&id) => return None,
            _ => {
                self.learn_id(id);
                self.layouts.get(id as usize)?.clone()?
            }
        };
        let current_pid = self.common_pid.int(r)?;
        let kind = match *layout {
            Layout::Switch { prev, state, next } => {
                let state = state.int(r)?;
                Kind::Switch {
                    prev: self.task(r, prev)?,
                    prev_state: TaskState::from_kernel(state & PREEMPTED_STATE != 0, state as u64),
                    next: self.task(r, next)?,
                }
            }
            Layout::Waking { task, target_cpu } => Kind::Waking {
                task: self.task(r, task)?,
                target_cpu: target_cpu.int(r)? as u16,
            },
            Layout::Migrate { task, orig, dest } => Kind::Migrate {
                task: self.task(r, task)?,
                orig_cpu: orig.int(r)? as u16,
                dest_cpu: dest.int(r)? as u16,
            },
            Layout::IrqEntry { irq, name } => Kind::IrqEntry {
                irq: irq.int(r)? as u32,
                name: String::from_utf8_lossy(name.text(r)?).into_owned(),
            },
            Layout::IrqExit => Kind::IrqExit,
            Layout::SoftirqEntry { vec } => {
                let vec = vec.int(r)?;
                Kind::SoftirqEntry {
                    name: SOFTIRQS
                        .get(vec as usize)
                        .map_or_else(|| format!("vec{vec}"), |s| s.to_string()),
                }
            }
            Layout::SoftirqExit => Kind::SoftirqExit,
            Layout::VectorEntry(ref name) => Kind::VectorEntry { name: name.clone() },
            Layout::VectorExit => Kind::VectorExit,
            Layout::Nmi { handler, delta } => Kind::Nmi {
                handler: self.symbol(handler.int(r)? as u64),
                delta_ns: delta.int(r)?.max(0) as u64,
            },
            // (Its process is the reader's to find: the record gives the thread only.)
            Layout::Jvm { probe, op } => Kind::Jvm {
                probe,
                process: 0,
                name: op
                    .and_then(|op| op.text(r))
                    .map(|t| String::from_utf8_lossy(t).into()),
                time_ns: None,
            },
        };
        Some(Event {
            cpu,
            ts_ns,
            current_pid,
            kind,
        })
    }
}

#[cfg(test)]
mod tests;
