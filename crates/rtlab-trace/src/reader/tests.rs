//! The reader's tests: where losses and unread stretches lie, and the end of a watch.

use super::*;

fn at(ts_ns: u64, kind: Kind) -> Event {
    Event {
        cpu: 1,
        ts_ns,
        current_pid: 0,
        kind,
    }
}

/// Kept events at 100, 200, 300 and 400 with a loss of 7 marked at `mark` (between 200 and 300).
fn with_loss(mark: u64) -> std::collections::VecDeque<Event> {
    [100, 200, mark, 300, 400]
        .into_iter()
        .map(|ts| {
            at(
                ts,
                if ts == mark {
                    Kind::Lost(7)
                } else {
                    Kind::IrqExit
                },
            )
        })
        .collect()
}

#[test]
fn a_loss_is_unknown_from_the_event_before_its_mark_to_the_event_after() {
    let events = with_loss(290);
    // The window lies inside the unknown stretch though the mark is past it.
    let u = loss_within(1, &events, 220, 250).expect("overlaps");
    assert_eq!((u.cpu, u.from_ns, u.lost, u.behind_ns), (1, 220, 7, 0));
    // A window reaching back past the event before: unknown from that event on.
    assert_eq!(loss_within(1, &events, 150, 260).unwrap().from_ns, 200);
    // The window reaching into the stretch from after it.
    assert_eq!(loss_within(1, &events, 299, 350).unwrap().from_ns, 299);
    // Wholly before the stretch, or after it: known.
    assert_eq!(loss_within(1, &events, 110, 190), None);
    assert_eq!(loss_within(1, &events, 300, 390), None);
    assert_eq!(loss_within(1, &events, 310, 390), None);
}

#[test]
fn no_loss_or_a_loss_at_either_end_of_the_history() {
    let none: std::collections::VecDeque<Event> = [100, 200]
        .into_iter()
        .map(|t| at(t, Kind::IrqExit))
        .collect();
    assert_eq!(loss_within(1, &none, 0, 1_000), None);
    // A mark before every kept event: unknown from the start of time to the first one.
    let first: std::collections::VecDeque<Event> =
        [at(50, Kind::Lost(2)), at(100, Kind::IrqExit)].into();
    assert_eq!(loss_within(1, &first, 60, 90).unwrap().from_ns, 60);
    assert_eq!(loss_within(1, &first, 100, 200), None);
    // A mark after every kept event: unknown from the last one on.
    let last: std::collections::VecDeque<Event> =
        [at(100, Kind::IrqExit), at(150, Kind::Lost(4))].into();
    let u = loss_within(1, &last, 500, 600).unwrap();
    assert_eq!((u.from_ns, u.lost), (500, 4));
    assert_eq!(loss_within(1, &last, 10, 90), None);
}

#[test]
fn of_two_losses_the_earlier_stretch_is_named() {
    let events: std::collections::VecDeque<Event> = [
        at(100, Kind::IrqExit),
        at(150, Kind::Lost(1)),
        at(200, Kind::IrqExit),
        at(250, Kind::Lost(9)),
        at(300, Kind::IrqExit),
    ]
    .into();
    let u = loss_within(1, &events, 120, 280).unwrap();
    assert_eq!((u.from_ns, u.lost), (120, 1));
    let u = loss_within(1, &events, 210, 280).unwrap();
    assert_eq!((u.from_ns, u.lost), (210, 9));
}

/// A watch that asks for one explanation at its end and counts its ends.
#[derive(Debug, Default)]
struct Ends {
    flushes: usize,
    explained: usize,
}

impl Watcher for Ends {
    fn wants(&self) -> crate::watcher::Wants {
        Default::default()
    }
    fn offer(&mut self, _e: &Event) {}
    fn drained(&mut self, drained_at: u64, stopping: bool, ask: &mut dyn FnMut(Request)) {
        if stopping {
            self.flushes += 1;
            ask(Request {
                series: 0,
                cpu: 0,
                tid: 1,
                deadline_ns: drained_at - 2_000_000,
                woke_ns: drained_at - 1_000_000,
                running_ns: None,
                wait: crate::wait::Wait::Timer,
                slack_ns: 0,
            });
        }
    }
    fn follow(&mut self, _source: &mut dyn crate::watcher::Probes) {}
    fn reader_cpus(&self, _now_ns: u64) -> Option<Vec<usize>> {
        None
    }
    fn series_name(&self, _index: u16) -> Option<String> {
        Some("w".into())
    }
    fn explained(&mut self, _series: u16, _o: Outlier) {
        self.explained += 1;
    }
    fn just_attached(&self, _now_ns: u64) -> bool {
        false
    }
}

#[test]
fn a_watch_is_ended_once_however_long_the_reader_reads_on_for_its_explanations() {
    // The reader reads on after the stop until the explanations asked for at the watch's
    // end are done; the watch's end (its flush) must not run again meanwhile.
    let dir = tempfile::tempdir().unwrap();
    let pipe_path = dir.path().join("trace_pipe_raw");
    // Five polls' worth of pages (with no events: the reader only has to read on).
    let pages = 4 * crate::instance::PAGES_PER_POLL + 1;
    std::fs::write(&pipe_path, vec![0u8; pages * 4096]).unwrap();
    let file = std::fs::File::open(&pipe_path).unwrap();
    let source = Source::Tracefs {
        pages: Box::new(crate::instance::Pages::over(dir.path(), vec![(0, file)])),
        dir: dir.path().to_path_buf(),
        jvm_files: Default::default(),
        processes: Default::default(),
    };
    let (_tx, rx) = mpsc::channel::<Request>();
    let (stop, threshold, lost) = (AtomicBool::new(true), AtomicU64::new(0), AtomicU64::new(0));
    let ends = Mutex::new(Ends::default());
    let shared = Shared {
        stop: &stop,
        threshold: &threshold,
        lost: &lost,
        watch: Some(&ends),
    };
    let options = Options {
        backend: crate::Backend::Tracefs,
        threshold_ns: Some(0),
        top: 10,
        trace_out: None,
        reader_cpus: vec![],
        series_names: vec![],
        started_ns: 0,
        waits: vec![],
        rings: None,
        stacks: false,
    };
    let rules = crate::rules();
    read_loop(source, rx, shared, &options, &rules).unwrap();
    let ends = ends.into_inner().unwrap();
    assert_eq!((ends.flushes, ends.explained), (1, 1));
}
