//! The `--load SPEC` grammar.

use rtlab_stats::{parse_duration, parse_size, Nanos, ParseError};
use std::fmt;
use std::str::FromStr;

/// Help text for `rtlab load --help` and `--load`: one paragraph per kind.
pub const LOAD_HELP: &str = "\
LOAD SPECS (repeat --load to combine several):
  cpu[:N]                 N spinning SCHED_OTHER threads (default: one per usable CPU)
  cpu:P%                  each usable CPU busy P % of every 10 ms (1-90), half of it by a
                          SCHED_FIFO 1 thread and half by a SCHED_OTHER one, each pinned
                          (the 60-80 % mixed load of a 2009 real-time Java
                          proof of concept: cpu:60%)
  mmap[:SIZE][:mlock]     a non-RT thread that maps, touches and unmaps SIZE in a loop
                          (default 100MiB); ':mlock' also mlocks each mapping. This is the
                          load with which, in 2008, a non-RT mmap delayed an RT futex wait.
                          Note: while the process holds mlockall(MCL_FUTURE) (rtlab's default
                          --mlock) every mapping is locked anyway; use --no-mlock to compare.
  alloc[:RATE]            allocation churn with ever-growing strings (a garbage-collected
                          heap growing and shrinking); RATE in bytes per second, e.g. 200MiB
                          (default: as fast as one thread can)
  gc[:PRIO[:BURST/PERIOD]] a garbage collector's shape: a SCHED_FIFO thread named 'rtlab-gc'
                          at PRIO (default 20: boosted above ordinary work) that allocates,
                          walks and frees a heap in bursts of BURST every PERIOD (default
                          5ms/100ms), on any CPU (collector threads that block RT threads)
  fork[:N]                N threads forking and reaping trivial children (default 1)
  net[:N]                 N bulk TCP streams over loopback (default 1)
  io                      write + fsync of a temporary file (removed afterwards)
  hog:PRIO:RUN/PERIOD[:CPU]
                          a SCHED_FIFO thread named 'rtlab-hog' at PRIO (1-99) that spins
                          RUN every PERIOD, optionally pinned to CPU: a known, controllable
                          interference, e.g. hog:99:3ms/200ms:0 (RUN at most 1s and
                          90 % of PERIOD)

Examples:
  rtlab load cpu mmap:200MiB --duration 30s
  rtlab wakeup --load cpu:2 --load hog:99:1ms/100ms:0 --duration 10s";

/// What a load does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadKind {
    /// Spinning threads (`None`: one per usable CPU).
    Cpu {
        /// Thread count.
        threads: Option<usize>,
    },
    /// Each usable CPU busy `percent` % of every period: half by a SCHED_FIFO 1 thread,
    /// half by a SCHED_OTHER thread, each pinned to the CPU.
    Utilisation {
        /// Busy share of each CPU, 1-90.
        percent: u32,
    },
    /// Map, touch, unmap in a loop.
    Mmap {
        /// Bytes per mapping.
        size: u64,
        /// mlock each mapping.
        mlock: bool,
    },
    /// Allocation churn.
    Alloc {
        /// Bytes per second, `None` for unthrottled.
        rate: Option<u64>,
    },
    /// Allocation bursts at real-time priority (a collector's shape).
    Gc {
        /// FIFO priority.
        prio: u32,
        /// Burst length.
        burst: Nanos,
        /// Period.
        period: Nanos,
    },
    /// Fork and reap.
    Fork {
        /// Thread count.
        threads: usize,
    },
    /// Bulk loopback TCP.
    Net {
        /// Stream count.
        streams: usize,
    },
    /// Write + fsync.
    Io,
    /// A periodic SCHED_FIFO spinner.
    Hog {
        /// FIFO priority.
        prio: u32,
        /// Spin time per period.
        run: Nanos,
        /// Period.
        period: Nanos,
        /// Pin to this CPU.
        cpu: Option<usize>,
    },
}

impl LoadKind {
    /// The kind as the grammar writes it (`cpu`, `cpu:P%`, `hog` ...), for messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            LoadKind::Cpu { .. } => "cpu",
            LoadKind::Utilisation { .. } => "cpu:P%",
            LoadKind::Mmap { .. } => "mmap",
            LoadKind::Alloc { .. } => "alloc",
            LoadKind::Gc { .. } => "gc",
            LoadKind::Fork { .. } => "fork",
            LoadKind::Net { .. } => "net",
            LoadKind::Io => "io",
            LoadKind::Hog { .. } => "hog",
        }
    }
}

/// A parsed `--load` argument, keeping the text as given (it goes into the result document).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadSpec {
    /// As written on the command line.
    pub text: String,
    /// What it means.
    pub kind: LoadKind,
}

impl fmt::Display for LoadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why a `--load` spec was refused: each says which part and the form it takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// A kind that is none of the grammar's.
    #[error(
        "unknown load kind '{0}' (expected cpu, mmap, alloc, gc, fork, net, io or hog; \
         see 'rtlab load --help')"
    )]
    UnknownKind(String),
    /// A thread or stream count (`what`: `cpu:N` ...) out of range.
    #[error("{what} must be a number from 1 to 1024, got '{got}'")]
    Count {
        /// The form it belongs to.
        what: &'static str,
        /// As written.
        got: String,
    },
    /// More `:` parts than the kind takes.
    #[error("unexpected ':{extra}' after '{kind}'")]
    Extra {
        /// The kind's form.
        kind: &'static str,
        /// The parts too many, `:`-joined.
        extra: String,
    },
    /// `cpu:P%` with P out of range.
    #[error("cpu:P% needs P from 1 to 90 (the CPU's own work needs the rest), got '{0}'")]
    Percent(String),
    /// A size (of `mmap` or `alloc`, the kind) that does not parse.
    #[error("{kind}: {source}")]
    Size {
        /// The kind.
        kind: &'static str,
        /// Why.
        source: ParseError,
    },
    /// `mmap:0`.
    #[error("mmap: SIZE must be above 0")]
    ZeroSize,
    /// `alloc:0`.
    #[error("alloc: RATE must be above 0 (leave it out for no limit)")]
    ZeroRate,
    /// An mmap size over half the machine's memory.
    #[error("mmap: SIZE must be at most half of this machine's memory ({total_mib} MiB)")]
    SizeOverHalf {
        /// The machine's memory, in MiB.
        total_mib: u64,
    },
    /// A duration (`gc BURST`, `hog PERIOD` ...: the field) that does not parse.
    #[error("{field}: {source}")]
    Duration {
        /// The kind and field.
        field: &'static str,
        /// Why.
        source: ParseError,
    },
    /// A priority (of `gc` or `hog`, the kind) outside 1-99.
    #[error("{kind}: PRIO must be 1-99, got '{got}'")]
    Prio {
        /// The kind.
        kind: &'static str,
        /// As written.
        got: String,
    },
    /// More parts than `gc` takes.
    #[error("gc takes {}", GC_FORM)]
    GcForm,
    /// A `gc` burst without its period.
    #[error("gc: expected BURST/PERIOD, got '{0}' ({form})", form = GC_FORM)]
    GcNoPeriod(String),
    /// A `gc` burst out of bounds.
    #[error(
        "gc: BURST must be above 0, at most 1s and at most 90 % of PERIOD ({})",
        GC_FORM
    )]
    GcBurst,
    /// Too few or too many parts for `hog`.
    #[error("hog needs {}", HOG_FORM)]
    HogForm,
    /// A `hog` run without its period.
    #[error("hog: expected RUN/PERIOD, got '{0}' ({form})", form = HOG_FORM)]
    HogNoPeriod(String),
    /// A `hog` run of 0, or not below its period.
    #[error("hog: RUN must be above 0 and below PERIOD ({})", HOG_FORM)]
    HogRunNotBelowPeriod,
    /// A `hog` run over [`MAX_HOG_RUN`].
    #[error("hog: RUN must be at most 1s, got {0}")]
    HogRunTooLong(Nanos),
    /// A `hog` run over 90 % of its period.
    #[error(
        "hog: RUN may be at most 90 % of PERIOD (the CPU's other work needs the rest), got {run}/{period}"
    )]
    HogRunShare {
        /// The run.
        run: Nanos,
        /// The period.
        period: Nanos,
    },
    /// A `hog` CPU that is not a number.
    #[error("hog: CPU must be a number, got '{0}'")]
    HogCpu(String),
}

fn count(arg: &str, what: &'static str) -> Result<usize, SpecError> {
    match arg.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(SpecError::Count {
            what,
            got: arg.to_string(),
        }),
    }
}

fn no_extra(kind: &'static str, rest: &[&str]) -> Result<(), SpecError> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(SpecError::Extra {
            kind,
            extra: rest.join(":"),
        })
    }
}

impl FromStr for LoadSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<Self, SpecError> {
        let parts: Vec<&str> = text.trim().split(':').collect();
        let (name, args) = (parts[0].to_ascii_lowercase(), &parts[1..]);
        let kind = match name.as_str() {
            "cpu" => {
                no_extra("cpu:N", args.get(1..).unwrap_or(&[]))?;
                match args.first().and_then(|a| a.strip_suffix('%')) {
                    Some(p) => LoadKind::Utilisation {
                        percent: match p.trim().parse::<u32>() {
                            Ok(p) if (1..=90).contains(&p) => p,
                            _ => return Err(SpecError::Percent(p.to_string())),
                        },
                    },
                    None => LoadKind::Cpu {
                        threads: args.first().map(|a| count(a, "cpu:N")).transpose()?,
                    },
                }
            }
            "mmap" => {
                let mut size = 100 << 20;
                let mut mlock = false;
                for arg in args {
                    if arg.eq_ignore_ascii_case("mlock") {
                        mlock = true;
                    } else {
                        size = parse_size(arg).map_err(|source| SpecError::Size {
                            kind: "mmap",
                            source,
                        })?;
                        if size == 0 {
                            return Err(SpecError::ZeroSize);
                        }
                        // Touched (and maybe locked) in full every cycle: over half the memory
                        // pushes the machine into reclaim, or every mmap fails and the load
                        // silently does nothing.
                        if let Some(total) = rtlab_sys::sysinfo::total_memory_bytes() {
                            if size > total / 2 {
                                return Err(SpecError::SizeOverHalf {
                                    total_mib: total >> 20,
                                });
                            }
                        }
                    }
                }
                LoadKind::Mmap { size, mlock }
            }
            "alloc" => {
                no_extra("alloc:RATE", args.get(1..).unwrap_or(&[]))?;
                let rate = args
                    .first()
                    .map(|a| {
                        parse_size(a.trim_end_matches("/s")).map_err(|source| SpecError::Size {
                            kind: "alloc",
                            source,
                        })
                    })
                    .transpose()?;
                if rate == Some(0) {
                    return Err(SpecError::ZeroRate);
                }
                LoadKind::Alloc { rate }
            }
            "fork" => {
                no_extra("fork:N", args.get(1..).unwrap_or(&[]))?;
                LoadKind::Fork {
                    threads: args.first().map_or(Ok(1), |a| count(a, "fork:N"))?,
                }
            }
            "net" => {
                no_extra("net:N", args.get(1..).unwrap_or(&[]))?;
                LoadKind::Net {
                    streams: args.first().map_or(Ok(1), |a| count(a, "net:N"))?,
                }
            }
            "io" => {
                no_extra("io", args)?;
                LoadKind::Io
            }
            "hog" => parse_hog(args)?,
            "gc" => parse_gc(args)?,
            other => return Err(SpecError::UnknownKind(other.to_string())),
        };
        Ok(LoadSpec {
            text: text.trim().to_string(),
            kind,
        })
    }
}

/// The form of a `gc` spec, for messages.
const GC_FORM: &str = "gc[:PRIO[:BURST/PERIOD]], e.g. gc:20:5ms/100ms";

/// The form of a `hog` spec, for messages.
const HOG_FORM: &str = "hog:PRIO:RUN/PERIOD[:CPU], e.g. hog:99:3ms/200ms:0";

/// The duration in `text`, or the error naming `field`.
fn duration(text: &str, field: &'static str) -> Result<Nanos, SpecError> {
    parse_duration(text).map_err(|source| SpecError::Duration { field, source })
}

/// A real-time priority (1-99) of a `kind` spec.
fn prio(text: &str, kind: &'static str) -> Result<u32, SpecError> {
    match text.parse::<u32>() {
        Ok(p) if (1..=99).contains(&p) => Ok(p),
        _ => Err(SpecError::Prio {
            kind,
            got: text.to_string(),
        }),
    }
}

fn parse_gc(args: &[&str]) -> Result<LoadKind, SpecError> {
    if args.len() > 2 {
        return Err(SpecError::GcForm);
    }
    let prio = args.first().map_or(Ok(20), |p| prio(p, "gc"))?;
    let (burst, period) = match args.get(1) {
        None => (Nanos::from_millis(5), Nanos::from_millis(100)),
        Some(a) => {
            let (b, p) = a
                .split_once('/')
                .ok_or_else(|| SpecError::GcNoPeriod(a.to_string()))?;
            (duration(b, "gc BURST")?, duration(p, "gc PERIOD")?)
        }
    };
    // The same bounds as a hog's: a disturbance, never a lock-up.
    if burst.get() == 0
        || burst > MAX_HOG_RUN
        || burst.get() as u128 * 10 > period.get() as u128 * 9
    {
        return Err(SpecError::GcBurst);
    }
    Ok(LoadKind::Gc {
        prio,
        burst,
        period,
    })
}

/// The longest single hog run: long enough for any scheduling disturbance, short of a stall.
const MAX_HOG_RUN: Nanos = Nanos::from_secs(1);

fn parse_hog(args: &[&str]) -> Result<LoadKind, SpecError> {
    if args.len() < 2 || args.len() > 3 {
        return Err(SpecError::HogForm);
    }
    let prio = prio(args[0], "hog")?;
    let (run, period) = args[1]
        .split_once('/')
        .ok_or_else(|| SpecError::HogNoPeriod(args[1].to_string()))?;
    let run = duration(run, "hog RUN")?;
    let period = duration(period, "hog PERIOD")?;
    if run.get() == 0 || run >= period {
        return Err(SpecError::HogRunNotBelowPeriod);
    }
    // A real-time spinner that leaves a CPU no room starves the kernel's own threads; the
    // bounds keep it a disturbance (and the watchdog's job possible), not a lock-up.
    if run > MAX_HOG_RUN {
        return Err(SpecError::HogRunTooLong(run));
    }
    if run.get() as u128 * 10 > period.get() as u128 * 9 {
        return Err(SpecError::HogRunShare { run, period });
    }
    let cpu = args
        .get(2)
        .map(|c| {
            c.parse::<usize>()
                .map_err(|_| SpecError::HogCpu(c.to_string()))
        })
        .transpose()?;
    Ok(LoadKind::Hog {
        prio,
        run,
        period,
        cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(text: &str) -> LoadKind {
        text.parse::<LoadSpec>().unwrap().kind
    }

    #[test]
    fn parses_every_kind() {
        assert_eq!(kind("cpu"), LoadKind::Cpu { threads: None });
        assert_eq!(kind("cpu:2"), LoadKind::Cpu { threads: Some(2) });
        assert_eq!(kind("cpu:60%"), LoadKind::Utilisation { percent: 60 });
        let gc = |prio, b, p| LoadKind::Gc {
            prio,
            burst: Nanos::from_millis(b),
            period: Nanos::from_millis(p),
        };
        assert_eq!(kind("gc"), gc(20, 5, 100));
        assert_eq!(kind("gc:30"), gc(30, 5, 100));
        assert_eq!(kind("gc:30:10ms/50ms"), gc(30, 10, 50));
        for bad in [
            "gc:0",
            "gc:100",
            "gc:20:5ms",
            "gc:20:0ms/10ms",
            "gc:20:10ms/10ms",
            "gc:20:2s/10s",
            "gc:1:1ms/2ms:3",
        ] {
            assert!(bad.parse::<LoadSpec>().is_err(), "{bad}");
        }
        for bad in ["cpu:0%", "cpu:95%", "cpu:x%", "cpu:60%:1"] {
            assert!(bad.parse::<LoadSpec>().is_err(), "{bad}");
        }
        assert_eq!(
            kind("mmap"),
            LoadKind::Mmap {
                size: 100 << 20,
                mlock: false
            }
        );
        assert_eq!(
            kind("mmap:100MiB:mlock"),
            LoadKind::Mmap {
                size: 100 << 20,
                mlock: true
            }
        );
        assert_eq!(
            kind("mmap:1GiB"),
            LoadKind::Mmap {
                size: 1 << 30,
                mlock: false
            }
        );
        assert_eq!(kind("alloc"), LoadKind::Alloc { rate: None });
        assert_eq!(
            kind("alloc:200MiB/s"),
            LoadKind::Alloc {
                rate: Some(200 << 20)
            }
        );
        assert_eq!(kind("fork:3"), LoadKind::Fork { threads: 3 });
        assert_eq!(kind("net"), LoadKind::Net { streams: 1 });
        assert_eq!(kind("io"), LoadKind::Io);
        assert_eq!(
            kind("hog:99:3ms/200ms:0"),
            LoadKind::Hog {
                prio: 99,
                run: Nanos::from_millis(3),
                period: Nanos::from_millis(200),
                cpu: Some(0)
            }
        );
        assert_eq!("cpu:2".parse::<LoadSpec>().unwrap().to_string(), "cpu:2");
    }

    #[test]
    fn rejects_bad_specs_with_reasons() {
        for (bad, needle) in [
            ("warpdrive", "unknown load kind 'warpdrive'"),
            ("cpu:0", "1 to 1024"),
            ("cpu:2:3", "unexpected"),
            ("mmap:lots", "mmap"),
            ("hog:100:1ms/2ms", "PRIO must be 1-99"),
            ("hog:50:3ms/2ms", "below PERIOD"),
            // Regression (hardening, low): every mmap failed and the run said "not visible".
            ("mmap:100000GiB", "half of this machine's memory"),
            // Regression (hardening #8): a 59-minute FIFO spin was accepted.
            ("hog:99:59m/1h", "at most 1s"),
            ("hog:99:95ms/100ms", "90 %"),
            ("hog:50:3ms", "RUN/PERIOD"),
            ("hog:50", "hog needs"),
            ("io:5", "unexpected"),
        ] {
            let err = bad.parse::<LoadSpec>().unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn every_refusal_reads_as_it_did_when_it_was_a_string() {
        for (bad, said) in [
            ("warpdrive", "unknown load kind 'warpdrive' (expected cpu, mmap, alloc, gc, fork, net, io or hog; see 'rtlab load --help')"),
            ("fork:0", "fork:N must be a number from 1 to 1024, got '0'"),
            ("net:1:2", "unexpected ':2' after 'net:N'"),
            ("io:5:6", "unexpected ':5:6' after 'io'"),
            ("cpu:95%", "cpu:P% needs P from 1 to 90 (the CPU's own work needs the rest), got '95'"),
            ("mmap:0", "mmap: SIZE must be above 0"),
            ("alloc:0", "alloc: RATE must be above 0 (leave it out for no limit)"),
            ("gc:1:2:3", "gc takes gc[:PRIO[:BURST/PERIOD]], e.g. gc:20:5ms/100ms"),
            ("gc:0", "gc: PRIO must be 1-99, got '0'"),
            ("gc:20:5ms", "gc: expected BURST/PERIOD, got '5ms' (gc[:PRIO[:BURST/PERIOD]], e.g. gc:20:5ms/100ms)"),
            ("gc:20:10ms/10ms", "gc: BURST must be above 0, at most 1s and at most 90 % of PERIOD (gc[:PRIO[:BURST/PERIOD]], e.g. gc:20:5ms/100ms)"),
            ("hog:1", "hog needs hog:PRIO:RUN/PERIOD[:CPU], e.g. hog:99:3ms/200ms:0"),
            ("hog:x:1ms/2ms", "hog: PRIO must be 1-99, got 'x'"),
            ("hog:9:1ms", "hog: expected RUN/PERIOD, got '1ms' (hog:PRIO:RUN/PERIOD[:CPU], e.g. hog:99:3ms/200ms:0)"),
            ("hog:9:2ms/2ms", "hog: RUN must be above 0 and below PERIOD (hog:PRIO:RUN/PERIOD[:CPU], e.g. hog:99:3ms/200ms:0)"),
            ("hog:9:2s/20s", "hog: RUN must be at most 1s, got 2.00 s"),
            ("hog:9:19ms/20ms", "hog: RUN may be at most 90 % of PERIOD (the CPU's other work needs the rest), got 19.0 ms/20.0 ms"),
            ("hog:9:1ms/20ms:x", "hog: CPU must be a number, got 'x'"),
        ] {
            assert_eq!(bad.parse::<LoadSpec>().unwrap_err().to_string(), said, "{bad}");
        }
        for (bad, field) in [
            ("alloc:x", "alloc: "),
            ("gc:20:x/1ms", "gc BURST: "),
            ("hog:9:1ms/x", "hog PERIOD: "),
        ] {
            let said = bad.parse::<LoadSpec>().unwrap_err().to_string();
            assert!(said.starts_with(field), "{bad}: {said}");
        }
    }
}
