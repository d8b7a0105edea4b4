use super::*;

/// The formats as Linux 6.18 writes them (`events/sched/sched_switch/format` ...).
const SWITCH: &str = "name: sched_switch
ID: 372
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;

print fmt: \"prev_comm=%s prev_pid=%d\", REC->prev_comm, REC->prev_pid
";

const MIGRATE: &str = "name: sched_migrate_task
ID: 371
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__data_loc char[] comm;\toffset:8;\tsize:4;\tsigned:0;
\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;
\tfield:int prio;\toffset:16;\tsize:4;\tsigned:1;
\tfield:int orig_cpu;\toffset:20;\tsize:4;\tsigned:1;
\tfield:int dest_cpu;\toffset:24;\tsize:4;\tsigned:1;
";

const HEADER_PAGE: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;
";

fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

/// A `sched_switch` record (id 372): `prev` preempted or asleep, `next` taking the CPU.
fn switch_record(prev: (&str, i32, i32), state: i64, next: (&str, i32, i32)) -> Vec<u8> {
    let mut r = vec![0u8; 64];
    put(&mut r, 0, &372u16.to_ne_bytes());
    put(&mut r, 4, &prev.1.to_ne_bytes());
    put(&mut r, 8, prev.0.as_bytes());
    put(&mut r, 24, &prev.1.to_ne_bytes());
    put(&mut r, 28, &prev.2.to_ne_bytes());
    put(&mut r, 32, &state.to_ne_bytes());
    put(&mut r, 40, next.0.as_bytes());
    put(&mut r, 56, &next.1.to_ne_bytes());
    put(&mut r, 60, &next.2.to_ne_bytes());
    r
}

/// A page as the kernel's reader copies it: its time, its records, and where events were
/// lost before it, their count.
struct PageBuilder {
    data: Vec<u8>,
    ts: u64,
}

impl PageBuilder {
    fn new(ts: u64) -> Self {
        PageBuilder {
            data: Vec::new(),
            ts,
        }
    }

    fn head(&mut self, type_len: u32, delta: u32) {
        self.data
            .extend_from_slice(&(type_len | (delta << 5)).to_ne_bytes());
    }

    fn record(mut self, delta: u32, payload: &[u8]) -> Self {
        let words = payload.len().div_ceil(4);
        self.head(words as u32, delta);
        self.data.extend_from_slice(payload);
        self.data.resize(self.data.len().next_multiple_of(4), 0);
        self
    }

    /// A record too long for the header's length (`type_len` 0, its length in a word).
    fn long_record(mut self, delta: u32, payload: &[u8]) -> Self {
        self.head(0, delta);
        self.data
            .extend_from_slice(&(payload.len() as u32 + 4).to_ne_bytes());
        self.data.extend_from_slice(payload);
        self.data.resize(self.data.len().next_multiple_of(4), 0);
        self
    }

    fn extend(mut self, delta: u64) -> Self {
        self.head(TIME_EXTEND, (delta & ((1 << 27) - 1)) as u32);
        self.data
            .extend_from_slice(&((delta >> 27) as u32).to_ne_bytes());
        self
    }

    fn absolute(mut self, ts: u64) -> Self {
        self.head(TIME_STAMP, (ts & ((1 << 27) - 1)) as u32);
        self.data
            .extend_from_slice(&((ts >> 27) as u32).to_ne_bytes());
        self
    }

    /// A removed record, its delta not the clock's.
    fn padding(mut self, delta: u32, len: u32) -> Self {
        self.head(PADDING, delta);
        self.data.extend_from_slice(&len.to_ne_bytes());
        self.data.resize(self.data.len() + len as usize - 4, 0xee);
        self
    }

    fn build(self, missed: Option<Option<u64>>) -> Vec<u8> {
        let mut page = vec![0u8; 4096];
        put(&mut page, 0, &self.ts.to_ne_bytes());
        let mut commit = self.data.len() as u64;
        put(&mut page, 16, &self.data);
        if let Some(count) = missed {
            commit |= MISSED_EVENTS;
            if let Some(n) = count {
                commit |= MISSED_STORED;
                put(&mut page, 16 + self.data.len(), &n.to_ne_bytes());
            }
        }
        put(&mut page, 8, &commit.to_ne_bytes());
        page
    }
}

fn walked(page: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    walk_page(page, &PageHeader::default(), &mut |ts, r| {
        out.push((ts, r.to_vec()))
    });
    out
}

#[test]
fn a_format_file_gives_each_field_its_place_and_shape() {
    let f = Format::parse(SWITCH);
    assert_eq!((f.name.as_str(), f.id), ("sched_switch", Some(372)));
    let comm = f.get("prev_comm").unwrap();
    assert_eq!((comm.offset, comm.size, comm.shape), (8, 16, Shape::Chars));
    let state = f.get("prev_state").unwrap();
    assert_eq!((state.offset, state.size), (32, 8));
    assert_eq!(state.shape, Shape::Int { signed: true });
    assert_eq!(f.get("common_pid").unwrap().offset, 4);
    assert!(matches!(Layout::of(&f), Some(Layout::Switch { .. })));
    let m = Format::parse(MIGRATE);
    assert_eq!(m.get("comm").unwrap().shape, Shape::DataLoc);
    assert!(matches!(Layout::of(&m), Some(Layout::Migrate { .. })));
    // A kernel whose event lacks a field the layout reads: not decoded rather than misread.
    let without = SWITCH.replace("prev_state", "prev_status");
    assert!(Layout::of(&Format::parse(&without)).is_none());
    assert_eq!(PageHeader::parse(HEADER_PAGE), PageHeader::default());
}

#[test]
fn strings_are_read_where_their_word_says() {
    let mut r = vec![0u8; 40];
    // `__data_loc`: offset 28 from the record's start, 6 bytes ("kwork" and its NUL).
    put(&mut r, 8, &(28u32 | (6 << 16)).to_ne_bytes());
    put(&mut r, 28, b"kwork\0");
    let loc = Field {
        offset: 8,
        size: 4,
        shape: Shape::DataLoc,
    };
    assert_eq!(loc.text(&r), Some(&b"kwork"[..]));
    // `__rel_loc`: from the end of its word (12), 16 on.
    put(&mut r, 8, &(16u32 | (5 << 16)).to_ne_bytes());
    let rel = Field {
        shape: Shape::RelLoc,
        ..loc
    };
    assert_eq!(rel.text(&r), Some(&b"kwork"[..]));
    // Past the record: nothing, not a panic.
    put(&mut r, 8, &(38u32 | (6 << 16)).to_ne_bytes());
    assert_eq!(loc.text(&r), None);
}

#[test]
fn a_pages_times_are_its_own_plus_each_records_delta() {
    let payload = |b: u8| vec![b; 8];
    let page = PageBuilder::new(1_000)
        .record(5, &payload(1))
        // 2^27 + 3 ns later: more than a record's 27 bits of delta.
        .extend((1 << 27) + 3)
        .record(0, &payload(2))
        // A removed record: its delta is not the clock's.
        .padding(700, 12)
        .long_record(10, &[3u8; 120])
        .absolute(5_000_000_000)
        .record(2, &payload(4))
        .build(None);
    let got = walked(&page);
    let times: Vec<u64> = got.iter().map(|(ts, _)| *ts).collect();
    let after_extend = 1_005 + (1 << 27) + 3;
    assert_eq!(
        times,
        [1_005, after_extend, after_extend + 10, 5_000_000_002]
    );
    assert_eq!(got[0].1, payload(1));
    assert_eq!(got[2].1, vec![3u8; 120]);
    assert_eq!(got[3].1, payload(4));
    assert_eq!(page_missed(&page, &PageHeader::default()), Missed::None);
}

#[test]
fn a_page_says_how_many_were_lost_before_it_where_it_had_room() {
    let page = PageBuilder::new(1).record(1, &[0; 8]).build(Some(Some(42)));
    assert_eq!(
        page_missed(&page, &PageHeader::default()),
        Missed::Counted(42)
    );
    // The count after the records is not taken for one.
    assert_eq!(walked(&page).len(), 1);
    let full = PageBuilder::new(1).record(1, &[0; 8]).build(Some(None));
    assert_eq!(
        page_missed(&full, &PageHeader::default()),
        Missed::Uncounted
    );
    // A page whose commit says more than it holds is read as far as it goes.
    let mut short = PageBuilder::new(1).record(1, &[0; 8]).build(None);
    put(&mut short, 8, &100_000u64.to_ne_bytes());
    assert_eq!(walked(&short).len(), 1);
}

#[test]
fn a_switch_is_read_from_a_cpus_pipe_with_the_loss_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let format = dir.path().join("events/sched/sched_switch");
    std::fs::create_dir_all(&format).unwrap();
    std::fs::write(format.join("format"), SWITCH).unwrap();
    let preempted = switch_record(("stress-ng", 77, 120), PREEMPTED_STATE, ("rt-loop", 42, 19));
    let asleep = switch_record(("rt-loop", 42, 19), 1, ("<idle>", 0, 120));
    let mut pipe = PageBuilder::new(2_000_000)
        .record(100, &preempted)
        .build(None);
    pipe.extend(
        PageBuilder::new(3_000_000)
            .record(50, &asleep)
            .build(Some(Some(9))),
    );
    let path = dir.path().join("cpu3");
    std::fs::write(&path, &pipe).unwrap();
    let mut pages = Pages::over(dir.path(), vec![(3, std::fs::File::open(&path).unwrap())]);
    pages.learn(&format.join("format"));
    let mut events = Vec::new();
    // Two pages, then an empty read (the file's end): no CPU left behind.
    assert_eq!(pages.poll(&mut |e| events.push(e)).unwrap(), 0);
    assert_eq!(events.len(), 3, "{events:?}");
    let Kind::Switch {
        prev,
        prev_state,
        next,
    } = &events[0].kind
    else {
        panic!("{:?}", events[0]);
    };
    assert_eq!((events[0].cpu, events[0].ts_ns), (3, 2_000_100));
    assert_eq!(events[0].current_pid, 77);
    assert_eq!((&*prev.comm, prev.pid, prev.prio), ("stress-ng", 77, 120));
    assert!(prev_state.is_preempted());
    assert_eq!((&*next.comm, next.pid, next.prio), ("rt-loop", 42, 19));
    // The loss sits after the last event read before it, before the page's first.
    assert_eq!(events[1].kind, Kind::Lost(9));
    assert_eq!(events[1].ts_ns, 2_000_101);
    let Kind::Switch { prev_state, .. } = &events[2].kind else {
        panic!("{:?}", events[2]);
    };
    assert_eq!(prev_state.to_string(), "S");
    assert_eq!(events[2].ts_ns, 3_000_050);
    // Read up to its newest event; past it only from the next empty read on, to the time of
    // the one before (a record reserved just before a read may not be committed yet).
    assert_eq!(pages.read_until(3), 3_000_050);
    let before = rtlab_sys::time::monotonic_now_ns();
    assert_eq!(pages.poll(&mut |e| events.push(e)).unwrap(), 0);
    assert!(pages.read_until(3) > 3_000_050 && pages.read_until(3) < before);
    assert_eq!(pages.read_through(), pages.read_until(3));
    // A CPU it has no pipe of has nothing to read.
    assert_eq!(pages.read_until(0), u64::MAX);
}

#[test]
fn every_event_this_source_enables_is_decoded_on_this_kernel() {
    // The running kernel's own format files: a field renamed or retyped by a newer kernel
    // fails here, not silently in the field.
    let Some(root) = rtlab_sys::probe::tracefs_mount() else {
        rtlab_sys::testing::say_skipped("tracefs not mounted here");
        return;
    };
    let mut checked = 0;
    for ev in super::super::EVENTS {
        let Ok(text) = std::fs::read_to_string(root.join("events").join(ev).join("format")) else {
            continue; // (not built into this kernel, or not readable: the source says so)
        };
        let f = Format::parse(&text);
        assert!(f.id.is_some(), "{ev}: {text}");
        assert!(Layout::of(&f).is_some(), "{ev} has no layout: {text}");
        checked += 1;
    }
    if checked == 0 {
        rtlab_sys::testing::say_skipped(&format!(
            "no format file readable under {}",
            root.display()
        ));
        return;
    }
    assert_eq!(
        PageHeader::parse(&std::fs::read_to_string(root.join("events/header_page")).unwrap()),
        PageHeader::default()
    );
}
