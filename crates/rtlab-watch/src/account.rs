//! What the watch knows of each JVM process and where it comes from, said once per JVM at the
//! end: its JDK, the source of its stops (HotSpot's probes or its own log), of its threads'
//! parks and sleeps (the probes, timed by its clock reads or not, or the kernel's waits), and
//! what no source here shows.

use std::collections::{BTreeMap, HashMap};

/// The most JVM processes told of one by one (a node may run hundreds; past these, counted).
pub(crate) const MAX_ACCOUNTS: usize = 8;
/// The widest line of a note.
const WIDTH: usize = 120;

/// One JVM process, as found.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Account {
    /// Its JDK's version (its `release` file, or the JVM's own word through the attach).
    pub(crate) version: Option<String>,
    /// Its JDK's directory, as the process names it.
    pub(crate) home: Option<String>,
    /// The libjvm.so it maps (device, inode).
    pub(crate) lib: Option<(u64, u64)>,
    /// Its own log of stops is read (its libjvm.so has no probes).
    pub(crate) log: bool,
    /// It runs virtual threads.
    pub(crate) virtual_threads: bool,
    /// How its clock reads served.
    pub(crate) clock: Clock,
}

/// How a JVM's clock reads (System.nanoTime) served the timing of its threads' parks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Clock {
    /// Probed: a park counts from the read before it to the read after it.
    Probed,
    /// Probed, then removed (the process read it too often).
    Removed,
    /// Not probed (`--no-java-clock`, or it could not be).
    #[default]
    Not,
}

/// The JVM processes found, each with what is known of it.
#[derive(Debug, Default)]
pub(crate) struct Accounts {
    by_pid: BTreeMap<u32, Account>,
    /// JVM processes past [`MAX_ACCOUNTS`].
    over: std::collections::HashSet<u32>,
    /// What came of attaching to each libjvm.so's probes: how many, and whether the watched
    /// threads' parks and sleeps are among them.
    probed: HashMap<(u64, u64), (usize, bool)>,
}

impl Accounts {
    /// JVM `pid`'s account (None past [`MAX_ACCOUNTS`]: counted).
    pub(crate) fn of(&mut self, pid: u32) -> Option<&mut Account> {
        if !self.by_pid.contains_key(&pid) && self.by_pid.len() >= MAX_ACCOUNTS {
            self.over.insert(pid);
            return None;
        }
        Some(self.by_pid.entry(pid).or_default())
    }

    /// `n` of libjvm `lib`'s probes attached (`waits`: the parks' and sleeps' among them).
    pub(crate) fn probed(&mut self, lib: (u64, u64), n: usize, waits: bool) {
        self.probed.insert(lib, (n, waits));
    }

    /// One note per JVM (its lines), and how many JVMs were not told of.
    /// (`witness`: a JVM's stops the probes and its log both told, and how many differ.)
    pub(crate) fn notes(
        &self,
        witness: impl Fn(u32) -> Option<(u64, u64)>,
    ) -> (Vec<String>, usize) {
        let notes = (self.by_pid.iter())
            .map(|(&pid, a)| {
                let probes = a.lib.and_then(|l| self.probed.get(&l).copied());
                wrap(&said(pid, a, probes, witness(pid)))
            })
            .collect();
        (notes, self.over.len())
    }
}

/// What is said of JVM `pid` (`probes`: its probes attached, how many and whether its
/// threads' waits too), one part a line.
fn said(
    pid: u32,
    a: &Account,
    probes: Option<(usize, bool)>,
    witness: Option<(u64, u64)>,
) -> Vec<String> {
    let jdk = match (&a.version, &a.home) {
        (Some(v), Some(h)) => format!("JDK {v} ({h})"),
        (Some(v), None) => format!("JDK {v}"),
        (None, Some(h)) => format!("JDK of version unknown ({h})"),
        (None, None) => "JDK of version unknown".into(),
    };
    let stops = match (probes, a.log) {
        (Some((n, _)), _) => format!("HotSpot's probes ({n} attached)"),
        (None, true) => "its own log (no probes in its libjvm.so: turned on for the watch \
                         through the attach mechanism, off at the end)"
            .into(),
        (None, false) => "not seen (no probes attached, its log not read)".into(),
    };
    let waits = match (probes, a.clock) {
        (Some((_, true)), Clock::Probed) => {
            "HotSpot's probes, timed from its clock reads (System.nanoTime probed: about 1 us \
             a read), as a thread times itself"
        }
        (Some((_, true)), Clock::Removed) => {
            "HotSpot's probes (its clock probe removed: it read the clock more often than \
             --java-clock-limit), a few microseconds inside a thread's own figures"
        }
        (Some((_, true)), Clock::Not) => {
            "HotSpot's probes, a few microseconds inside a thread's own figures"
        }
        (_, Clock::Probed) => {
            "the kernel's wait calls, timed from its clock reads (System.nanoTime probed: \
             about 1 us a read), as a thread times itself"
        }
        _ => {
            "the kernel's wait calls (the JDK's own clock reads and locks around them are a \
             few microseconds more in a thread's own figures)"
        }
    };
    let mut unseen = vec!["thread-local handshakes (they stop one thread, not all)"];
    if a.log && probes.is_none() {
        unseen.push("its stops before its log was turned on");
    }
    let mut lines = vec![
        format!("JVM: process {pid}, {jdk}"),
        format!("  its stops (safepoints, collections) from {stops}"),
        format!("  its threads' parks and sleeps from {waits}"),
    ];
    if let (Some(_), true) = (probes, a.log) {
        lines.push(match witness {
            Some((n, 0)) => format!(
                "  its own log, read beside the probes: the {n} safepoints both told agree within 5 %"
            ),
            Some((n, d)) => format!(
                "  its own log, read beside the probes: {d} of the {n} safepoints both told differ \
                 by over 5 % (each in the JSON: verdict.details.jvm_witnesses)"
            ),
            None => "  its own log, read beside the probes: no safepoint both told".into(),
        });
    }
    if a.virtual_threads {
        lines.push(
            "  it runs virtual threads: their sleeps and parks are timed by one of its threads \
             (VirtualThread-unparker in JDK 21, the pool's delayScheduler in JDK 25), then run \
             on a carrier thread (ForkJoinPool-*-worker-*): the watch times those threads, not \
             each virtual thread (time those in the program)"
                .into(),
        );
    }
    lines.push(format!("  not seen: {}", unseen.join("; ")));
    lines
}

/// `lines` as one note of lines at most [`WIDTH`] wide (a long one broken at spaces, its
/// rest indented as its start).
fn wrap(lines: &[String]) -> String {
    let mut out = Vec::new();
    for line in lines {
        let text = line.trim_start();
        let indent = line.len() - text.len();
        let mut current = " ".repeat(indent);
        let mut started = false;
        for word in text.split(' ') {
            if started && current.chars().count() + 1 + word.chars().count() > WIDTH {
                out.push(std::mem::replace(&mut current, " ".repeat(indent + 2)));
                started = false;
            }
            if started {
                current.push(' ');
            }
            current.push_str(word);
            started = true;
        }
        out.push(current);
    }
    out.join("\n")
}

/// JDK `home`'s version as its `release` file names it (`JAVA_VERSION="25.0.3"`), read as
/// process `pid` sees it; None where it cannot be read or says something else.
pub(crate) fn release_version(pid: u32, home: &str) -> Option<String> {
    let path = format!("{}/release", home.trim_end_matches('/'));
    let bytes = rtlab_sys::procfs::read_in_root(pid, &path, 4096).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let v = (text.lines())
        .find_map(|l| l.strip_prefix("JAVA_VERSION="))?
        .trim()
        .trim_matches('"');
    let plain = |c: char| c.is_ascii_alphanumeric() || "._+-".contains(c);
    (!v.is_empty() && v.len() <= 32 && v.chars().all(plain)).then(|| v.to_string())
}

/// The JDK directory of a libjvm.so at `lib` (`<home>/lib/server/libjvm.so`).
pub(crate) fn home_of(lib: &std::path::Path) -> Option<String> {
    let home = lib.parent()?.parent()?.parent()?;
    Some(home.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_jvm_is_told_of_once_with_its_sources_in_lines_that_fit_120_columns() {
        let mut a = Accounts::default();
        let probed = Account {
            version: Some("25.0.3".into()),
            home: Some("/usr/lib/jvm/temurin-25-jdk-amd64".into()),
            lib: Some((1, 2)),
            virtual_threads: true,
            clock: Clock::Probed,
            ..Default::default()
        };
        *a.of(10).unwrap() = probed;
        a.probed((1, 2), 13, true);
        *a.of(11).unwrap() = Account {
            version: Some("17.0.15".into()),
            lib: Some((3, 4)),
            log: true,
            ..Default::default()
        };
        *a.of(12).unwrap() = Account {
            lib: Some((5, 6)),
            log: true,
            clock: Clock::Probed,
            ..Default::default()
        };
        let (notes, over) = a.notes(|_| None);
        assert_eq!((notes.len(), over), (3, 0));
        let first = &notes[0];
        assert!(first.starts_with("JVM: process 10, JDK 25.0.3 (/usr/lib/jvm/temurin-25"));
        assert!(first.contains("HotSpot's probes (13 attached)"), "{first}");
        assert!(first.contains("timed from its clock reads"), "{first}");
        assert!(first.contains("virtual threads"), "{first}");
        assert!(notes[1].contains("its own log"), "{}", notes[1]);
        assert!(notes[1].contains("before its log was turned on"));
        assert!(
            notes[1].contains("the kernel's wait calls ("),
            "{}",
            notes[1]
        );
        // Without probes, its clock probed: the kernel's waits timed as the thread times.
        assert!(notes[2].contains("the kernel's wait calls, timed from its clock reads"));
        for n in &notes {
            assert!(n.lines().all(|l| l.chars().count() <= WIDTH), "{n}");
            assert!(
                n.lines()
                    .skip(1)
                    .all(|l| l.starts_with("  ") && !l.starts_with("   ")
                        || l.starts_with("    ") && !l.starts_with("     ")),
                "{n}"
            );
            assert_eq!(n.matches("JVM: process").count(), 1);
        }
        for pid in 20..20 + MAX_ACCOUNTS as u32 {
            a.of(pid);
        }
        assert_eq!(a.notes(|_| None).1, 3);
    }

    #[test]
    fn a_release_file_gives_a_plain_version_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_str().unwrap();
        std::fs::write(
            dir.path().join("release"),
            "JAVA_VERSION=\"25.0.3\"\nOS=x\n",
        )
        .unwrap();
        let me = std::process::id();
        assert_eq!(release_version(me, home).as_deref(), Some("25.0.3"));
        std::fs::write(dir.path().join("release"), "JAVA_VERSION=\"25\u{1b}[2J\"\n").unwrap();
        assert_eq!(release_version(me, home), None);
        let lib = std::path::Path::new("/usr/lib/jvm/x/lib/server/libjvm.so");
        assert_eq!(home_of(lib).as_deref(), Some("/usr/lib/jvm/x"));
    }
}
