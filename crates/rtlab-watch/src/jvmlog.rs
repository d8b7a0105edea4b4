//! A JVM's own account of its stops, where HotSpot's probes are not there (a JDK built
//! without them): its unified log of safepoints and collections, turned on for the watch at
//! run time through the attach mechanism `jcmd` uses (`VM.log`, decorated with `timenanos`,
//! CLOCK_MONOTONIC), read as it grows, and turned off again at the end: the JVM's other log
//! outputs are never touched, and the file is removed.
//!
//! Why the log and not a JFR recording: the log needs nothing in the JVM but what every
//! HotSpot since JDK 9 has (no agent, no recording's buffers and threads, no repository on
//! its disk), says each safepoint's VM operation and its phases in one line as it ends, on
//! the same clock as the kernel's events, and is turned off by name without touching a
//! recording the user runs.
//!
//! One thread per JVM (`rtlab-jvmlog`, the observer's): the attach may wait seconds for a JVM
//! that is starting, which the reader must never do.

use rtlab_sys::hotspot::{jcmd, AttachError, JvmTmp, Target};
use rtlab_trace::safepoint::{parse_logged, Logged};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a JVM just started is given to install its SIGQUIT handler (it does so in its
/// first milliseconds; a JVM started with `-Xrs` never does).
const READY_WITHIN: Duration = Duration::from_secs(10);
/// How long the attach waits for the JVM's socket.
const ATTACH_WAIT: Duration = Duration::from_secs(5);
/// How often the log is read (it is flushed at every line: a safepoint is read within this
/// of its end, well inside the merge's lag plus the explainer's wait).
const READ_EVERY: Duration = Duration::from_millis(5);

/// What the followers found so far, for the watch to take.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Each JVM's stops, in the order it logged them.
    pub(crate) logged: Vec<(u32, Logged)>,
    /// What became of each JVM's log (one line each).
    pub(crate) notes: Vec<String>,
    /// JVM processes whose log was turned on, with their version as they say it and when
    /// the log was on (CLOCK_MONOTONIC).
    pub(crate) logs_on: Vec<(u32, Option<String>, u64)>,
    /// JVM processes whose log is read, with their VM thread (the one that runs the
    /// safepoints).
    pub(crate) vm_threads: Vec<(u32, Option<i64>)>,
    /// When each JVM's log was last read to its end (CLOCK_MONOTONIC).
    pub(crate) read_at: std::collections::HashMap<u32, u64>,
}

/// The log followers of the watched JVMs.
#[derive(Debug, Default)]
pub(crate) struct Followers {
    found: Arc<Mutex<Found>>,
    started: std::collections::HashSet<u32>,
    threads: Vec<Follower>,
}

/// A follower's thread: told to stop, it turns the log off, says it is done, and stays (an
/// observer thread the explanations still find alive) until told to exit.
#[derive(Debug)]
struct Follower {
    pid: u32,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    exit: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

/// How long the end of a run waits for the followers to turn the logs off.
const STOP_WAIT: Duration = Duration::from_secs(6);

impl Followers {
    /// Follows JVM `pid`'s log from now on (once per process).
    pub(crate) fn follow(&mut self, pid: u32) {
        if !self.started.insert(pid) {
            return;
        }
        let flags: [Arc<AtomicBool>; 3] = Default::default();
        let (found, [stop, done, exit]) = (self.found.clone(), flags.clone());
        let spawned = std::thread::Builder::new()
            .name("rtlab-jvmlog".into())
            .spawn(move || {
                follow(pid, &found, &stop);
                done.store(true, Ordering::Release);
                while !exit.load(Ordering::Acquire) {
                    std::thread::park();
                }
            });
        let [stop, done, exit] = flags;
        match spawned {
            Ok(thread) => self.threads.push(Follower {
                pid,
                stop,
                done,
                exit,
                thread,
            }),
            Err(e) => self.note(format!("JVM: process {pid}: its log not read ({e})")),
        }
    }

    /// Whether JVM `pid`'s log is followed (or was tried).
    pub(crate) fn follows(&self, pid: u32) -> bool {
        self.started.contains(&pid)
    }

    /// Whether JVM `pid`'s follower is still at work (turning its log on, or reading it):
    /// not done, whatever became of it.
    pub(crate) fn reading(&self, pid: u32) -> bool {
        (self.threads.iter()).any(|f| f.pid == pid && !f.done.load(Ordering::Acquire))
    }

    /// What was found since the last call.
    pub(crate) fn take(&self) -> Found {
        std::mem::take(&mut *self.found.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn note(&self, text: String) {
        (self.found.lock().unwrap_or_else(|p| p.into_inner()).notes).push(text);
    }

    /// Turns every log off and waits for the followers to have done so (the run ends).
    pub(crate) fn stop(&mut self) {
        for f in &self.threads {
            f.stop.store(true, Ordering::Relaxed);
        }
        let start = std::time::Instant::now();
        while start.elapsed() < STOP_WAIT
            && !self.threads.iter().all(|f| f.done.load(Ordering::Acquire))
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Followers {
    fn drop(&mut self) {
        self.stop();
        for f in self.threads.drain(..) {
            f.exit.store(true, Ordering::Release);
            f.thread.thread().unpark();
            let _ = f.thread.join();
        }
    }
}

/// The log's name in the JVM's `/tmp`: rtlab's, this run's, never guessed.
fn log_name(pid: u32) -> String {
    let random = rtlab_sys::fs::random_suffix().unwrap_or_else(|_| "0".into());
    format!("rtlab-{}-jvm{pid}-{random}.log", std::process::id())
}

/// The follower of JVM `pid`: turns its log on, reads it until `stop`, turns it off.
fn follow(pid: u32, found: &Mutex<Found>, stop: &AtomicBool) {
    let say = |text: String| {
        found
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .notes
            .push(text)
    };
    // Its /tmp held from now on: the log is removed after the JVM's end too.
    let tmp = match JvmTmp::of(pid) {
        Ok(tmp) => tmp,
        Err(why) => return say(format!("JVM: process {pid}: its /tmp not found ({why})")),
    };
    if rtlab_sys::hotspot::attach_disabled(pid) {
        return say(format!(
            "JVM: process {pid} has no probes and was started with -XX:+DisableAttachMechanism: \
             its safepoints and collections are not seen (its threads are watched from the \
             kernel only)"
        ));
    }
    let target = match ready(pid, stop) {
        Ok(t) => t,
        Err(why) => {
            return say(format!(
                "JVM: process {pid} has no probes and its own log could not be turned on ({why}): \
                 its safepoints are not seen"
            ))
        }
    };
    // (The JVM's own word: kept only if it is a plain version.)
    let plain = |v: &str| {
        let ok = |c: char| c.is_ascii_alphanumeric() || "._+-".contains(c);
        (!v.is_empty() && v.len() <= 32 && v.chars().all(ok)).then(|| v.to_string())
    };
    let version = jcmd(pid, "VM.version", ATTACH_WAIT).ok().and_then(|v| {
        v.lines()
            .find_map(|l| l.strip_prefix("JDK "))
            .and_then(plain)
    });
    let name = log_name(pid);
    let output = format!("output=file=/tmp/{name}");
    let on = format!(
        "VM.log {output} output_options=filecount=0 what=safepoint=info,gc=info \
         decorators=timenanos,tags"
    );
    // (An error comes back as text under status 0.)
    match jcmd(pid, &on, ATTACH_WAIT) {
        Ok(text) if text.trim().is_empty() => {}
        Ok(text) => {
            return say(format!(
                "JVM: process {pid}: its log refused: {}",
                text.trim()
            ))
        }
        Err(why) => return say(format!("JVM: process {pid}: its log not turned on ({why})")),
    }
    // (The command returned: the log is on by now.)
    let on_ns = rtlab_sys::time::monotonic_now_ns();
    let vm_thread = rtlab_sys::procfs::thread_names_of(pid as i32)
        .ok()
        .and_then(|t| t.into_iter().find(|t| t.name == "VM Thread"))
        .map(|t| t.tid as i64);
    {
        let mut f = found.lock().unwrap_or_else(|p| p.into_inner());
        f.vm_threads.push((pid, vm_thread));
        f.logs_on.push((pid, version, on_ns));
    }
    let file = read_log(pid, (&tmp, &target, &name), found, stop);
    // Off again by its name (the JVM's other outputs untouched), and the file removed if it
    // is still the one read.
    if Target::of(pid).is_ok() {
        let _ = jcmd(pid, &format!("VM.log {output} what=all=off"), ATTACH_WAIT);
    }
    if let Some(file) = file {
        let _ = tmp.remove_if_same(&name, &file);
    }
}

/// JVM `pid` once it catches SIGQUIT (a JVM just started installs its handler within
/// milliseconds), or why not.
fn ready(pid: u32, stop: &AtomicBool) -> Result<Target, AttachError> {
    let start = std::time::Instant::now();
    loop {
        let t = Target::of(pid)?;
        if t.catches_quit || start.elapsed() >= READY_WITHIN || stop.load(Ordering::Relaxed) {
            return match t.catches_quit {
                true => Ok(t),
                false => Err(AttachError::NoQuitHandler),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads JVM `pid`'s log `name` as it grows, until `stop` or the JVM's end: each stop to
/// `found`. Returns the file read (to remove it after).
fn read_log(
    pid: u32,
    (tmp, target, name): (&JvmTmp, &Target, &str),
    found: &Mutex<Found>,
    stop: &AtomicBool,
) -> Option<std::fs::File> {
    let mut file = None;
    let mut text = Vec::new();
    let mut last = false;
    while !last {
        // (Once more after the end: the lines written last.)
        last = stop.load(Ordering::Relaxed) || Target::of(pid).is_err();
        if file.is_none() {
            file = tmp.open_own_file(name, target.euid).ok();
        }
        if let Some(f) = file.as_mut() {
            let _ = f.read_to_end(&mut text);
        }
        let complete = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if complete > 0 {
            let lines = String::from_utf8_lossy(&text[..complete]).into_owned();
            text.drain(..complete);
            let logged: Vec<(u32, Logged)> = (lines.lines())
                .filter_map(|l| parse_logged(pid, l))
                .map(|l| (pid, l))
                .collect();
            (found.lock().unwrap_or_else(|p| p.into_inner()).logged).extend(logged);
        }
        let now = rtlab_sys::time::monotonic_now_ns();
        (found.lock().unwrap_or_else(|p| p.into_inner()).read_at).insert(pid, now);
        if !last {
            std::thread::sleep(READ_EVERY);
        }
    }
    file
}
