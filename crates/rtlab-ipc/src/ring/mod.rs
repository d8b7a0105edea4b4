//! The ring: single producer (`spsc`) or several producers serialised by a robust PI mutex
//! (`mpsc`), one consumer.
//!
//! Shared layout (`#[repr(C)]`, positions are byte counts, never pointers):
//!
//! | field               | written by | meaning                                                |
//! |---------------------|------------|--------------------------------------------------------|
//! | `magic`, `capacity`, `max_message`, `variant`, `creator_pid`, `wake_barrier` | creator | format tag, ring bytes (power of two), largest payload, spsc/mpsc, who made it, how a full ring's producer is woken |
//! | `head`              | producer   | bytes published so far (monotonic)                     |
//! | `tail`              | consumer   | bytes consumed so far (monotonic)                      |
//! | `consumer_waiting`  | both       | futex word: 1 = the consumer sleeps (or is about to) on an empty ring |
//! | `producer_waiting`  | both       | futex word: 1 = the producer sleeps on a full ring      |
//! | `consumer_pid`      | consumer   | who to check for liveness (0: none attached yet)        |
//! | `producer_pids[16]` | producers  | attached producers (spsc: slot 0 only)                  |
//! | `producer_lock`     | producers  | mpsc: robust PI mutex held while writing a record       |
//!
//! A record at position `p` (ring offset `p % capacity`, always 16-aligned) is a 16-byte
//! header (a `u64` *stamp*, then a `u32` payload length, 4 bytes unused) and the payload,
//! padded to 16 bytes. A record never wraps: when it does not fit before the end, the producer
//! writes a `WRAP` marker record and continues at 0. The stamp is the readiness word, next to
//! the data (as Aeron's frame length): `p + 1` once the record is complete, stored (Release)
//! last; the consumer polls the stamp at `tail`, never `head`, so a message costs the cache
//! lines of the record and little else. Before it publishes a record, the producer zeroes the
//! stamp slot just past it (which the room check keeps free), so the slot at `tail` always
//! holds 0 or the next record's stamp; any other value is a scribble. `head` is the producers'
//! bookkeeping, stored after the stamp: a producer killed between the two left a published
//! record at `head`, and the next one skips it; a producer killed before the stamp never
//! published its record (in mpsc the next producer inherits the lock as `OwnerDied` and simply
//! writes over the unpublished bytes). The producer re-reads `tail` only when its last reading
//! says the ring is full. A side that must wait first
//! spins for at most 20 us (a peer on another CPU usually answers sooner than a futex sleep
//! and wake take); with busy-polling it spins until its deadline. Sleep/wake: each side stores
//! its waiting flag, then fences, then re-reads the other side's stamp or position before
//! sleeping; the other side publishes or consumes, fences, then reads the flag: one of them
//! always sees the other. A consumer sleeping on an empty ring and the producer's publish use
//! SeqCst fences. A producer sleeping on a full ring (overload: rare by design) instead calls
//! `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` after storing its flag, and the consumer,
//! whose process registered for it, leaves the fence out after each consume (program order
//! only): the membarrier makes the consumer's CPU fence at some point, and either its read
//! of the flag comes after that point (it sees the flag) or its store of `tail` came before
//! it (the producer sees `tail`). So the message path of the consumer, which the round trip
//! waits on, has no fence, and the cost (an interrupt to each CPU running a registered
//! process) falls on a full ring. The creator chooses this when the kernel has the command
//! (`wake_barrier` in the header); otherwise both sides fence. `wake_model.rs` checks this
//! argument with loom over every interleaving, and shows the wake-up lost without the
//! membarrier, with a fence on one side only, or with the consumer's read moved above its
//! store.
//!
//! The consumer's fenceless path needs its store of `tail` to come before its read of the flag
//! in the machine code, which the compiler must promise (`compiler_fence` here). A consumer in
//! a language that cannot may always fence instead: the Java binding does
//! (`ShmChannel.tryReceive`), since the Java memory model (JLS 17.4) orders a store before a
//! later load of another location only between volatile accesses or across
//! `VarHandle.fullFence()`, and a JIT may move a plain, opaque or acquire load above a release
//! store, which no membarrier can undo.
//!
//! Attaching: one consumer and (spsc) one producer at a time; a slot whose process died may be
//! taken by a new one, which continues where the dead one stopped.

use crate::region::Region;
use rtlab_sync::{RobustGuard, RobustMutex};
use rtlab_sys::futex::{self, Scope, Wait};
use rtlab_sys::time::monotonic_now_ns;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"RTLABCH4");
const WRAP: u32 = u32::MAX;
/// Stamp (`u64`), length (`u32`), 4 unused bytes.
const RECORD_HEADER: u64 = 16;
/// Where a record's length sits in its header.
const LENGTH_AT: u64 = 8;
/// Records start (and positions move) in multiples of this.
const RECORD_ALIGN: u64 = 16;
/// The stamp slot past the newest record, which the producer zeroes and so keeps free.
const STAMP_LEN: u64 = 8;
/// How long a side that finds the ring empty (or full) spins before it sleeps: a peer on
/// another CPU usually answers within this, sooner than a futex sleep and wake would (their
/// cost: bench/RESULTS.md, "Figures the code's comments used to carry").
/// Bounded, so a silent peer costs at most this much CPU before the thread blocks.
const SPIN_NS: u64 = 20_000;
/// Producer slots of an mpsc channel.
pub const MAX_PRODUCERS: usize = 16;

/// Spins until `ready()` or `budget_ns` passed; true if ready. Between short bursts it yields
/// the CPU: a peer on the same CPU (at the same priority) then runs at once instead of
/// waiting for the spin to end; a peer on another CPU usually answers within the first burst.
#[inline]
fn spin_until(ready: impl Fn() -> bool, budget_ns: u64) -> bool {
    let until = monotonic_now_ns() + budget_ns;
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if monotonic_now_ns() >= until {
            return ready();
        }
        std::thread::yield_now();
    }
}

/// The short spin of a side that found the ring empty (or full): [`SPIN_NS`], or less when
/// the deadline comes first (none when it has passed: a zero timeout only polls).
fn spin_before_waiting(ready: impl Fn() -> bool, deadline_ns: Option<u64>) -> bool {
    let budget = match deadline_ns {
        None => SPIN_NS,
        Some(d) => d.saturating_sub(monotonic_now_ns()).min(SPIN_NS),
    };
    budget > 0 && spin_until(ready, budget)
}

/// Longest a blocked side sleeps (or busy-polls) before it checks whether its peer is alive.
const LIVENESS_SLICE_NS: u64 = 10_000_000;

/// Why a channel operation did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IpcError {
    /// The deadline passed.
    #[error("timed out")]
    TimedOut,
    /// The process at the other end has exited.
    #[error("the peer process died")]
    PeerDied,
    /// The shared memory holds something this side did not write and cannot trust.
    #[error("corrupt channel: {0}")]
    Corrupt(String),
    /// The message is larger than the channel's maximum.
    #[error("message of {len} bytes exceeds the channel maximum of {max}")]
    TooLarge {
        /// Offered length.
        len: usize,
        /// Channel maximum.
        max: usize,
    },
    /// The receive buffer is smaller than the message (which stays in the channel).
    #[error("receive buffer of {have} bytes is smaller than the {need}-byte message")]
    BufferTooSmall {
        /// Buffer length.
        have: usize,
        /// Message length.
        need: usize,
    },
    /// Creating or opening the shared memory failed.
    #[error("cannot create the channel: {0}")]
    Create(String),
    /// The end (or the name) is in use by a live process.
    #[error("in use: {0}")]
    Busy(String),
}

#[repr(C)]
struct Header {
    magic: u64,
    capacity: u64,
    max_message: u64,
    variant: u64,
    creator_pid: u64,
    /// 1: a consumer does not fence before it reads `producer_waiting`; a producer about to
    /// sleep on a full ring calls `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` instead
    /// (module docs). 0: both fence. Chosen by the creator, as the kernel allows.
    wake_barrier: u64,
    _pad0: [u64; 2],
    head: AtomicU64,
    _pad1: [u64; 7],
    tail: AtomicU64,
    _pad2: [u64; 7],
    consumer_waiting: AtomicU32,
    producer_waiting: AtomicU32,
    consumer_pid: AtomicU32,
    _pad3: [u32; 13],
    producer_pids: [AtomicU32; MAX_PRODUCERS],
    producer_lock: RobustMutex,
}

const HEADER_LEN: usize = std::mem::size_of::<Header>();
const _: () = assert!(HEADER_LEN.is_multiple_of(64));

/// The version of the record format and protocol [`RawLayout`] describes.
pub const FORMAT: u32 = 4;

/// A channel's shared memory, for a binding that sends or receives in its own language
/// without a call per message (the Java binding). It must follow the module docs exactly:
/// 16-aligned records of a `u64` stamp (`position + 1`, stored with Release last), a `u32`
/// length (`u32::MAX`: wrap to 0) and the payload; zero the stamp slot past a record before
/// stamping it; keep that slot free in the room check; store `head` (producer) or `tail`
/// (consumer) after, fence (a consumer: only unless `consumer_fenceless`; never let the
/// compiler move the flag's read above the store), and call [`ShmChannel::wake_peer_of`]
/// when the other side's waiting flag is 1. Anything unexpected (an odd stamp, a length past `max_message`, no
/// room, a wrap): fall back to [`Sender::send`] / [`Receiver::recv`], which report it.
#[derive(Debug, Clone, Copy)]
pub struct RawLayout {
    /// [`FORMAT`]: a binding written for another format must not use the fast path.
    pub format: u32,
    /// One producer: a producer may write without the producers' lock.
    pub spsc: bool,
    /// The mapping's start.
    pub base: *mut u8,
    /// The mapping's length.
    pub len: usize,
    /// The first 8 bytes of the mapping while it is intact.
    pub magic: u64,
    /// Ring bytes (a power of two).
    pub capacity: u64,
    /// Largest payload.
    pub max_message: u64,
    /// Offset of the ring in the mapping.
    pub ring_at: usize,
    /// Offset of `head` (u64).
    pub head_at: usize,
    /// Offset of `tail` (u64).
    pub tail_at: usize,
    /// Offset of the consumer's waiting flag (u32).
    pub consumer_waiting_at: usize,
    /// Offset of the producer's waiting flag (u32).
    pub producer_waiting_at: usize,
    /// A consumer reads the producer's waiting flag after it stores `tail` without a fence
    /// between (program order only): the producer's side makes its CPU fence (module docs).
    /// False: fence there.
    pub consumer_fenceless: bool,
}

/// Who may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// One producer process at a time; lock-free.
    Spsc,
    /// Up to [`MAX_PRODUCERS`] producers (processes or threads), serialised by a robust PI mutex.
    Mpsc,
}

impl Variant {
    fn code(self) -> u64 {
        match self {
            Variant::Spsc => 0,
            Variant::Mpsc => 1,
        }
    }
}

/// How to make a channel.
#[derive(Debug, Clone, Copy)]
pub struct ChannelOptions {
    /// Ring bytes (rounded up to a power of two, at least 4 KiB).
    pub capacity: usize,
    /// Largest payload (at most a quarter of the ring).
    pub max_message: usize,
    /// spsc or mpsc.
    pub variant: Variant,
    /// Permission bits of a named channel (default 0600: the owner only).
    pub mode: u32,
}

impl ChannelOptions {
    /// spsc, mode 0600.
    pub fn new(capacity: usize, max_message: usize) -> Self {
        ChannelOptions {
            capacity,
            max_message,
            variant: Variant::Spsc,
            mode: 0o600,
        }
    }

    /// The same with `variant`.
    pub fn variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// The same with permission bits `mode`.
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }
}

/// A channel in shared memory: anonymous ([`ShmChannel::create`], then `fork`) or named under
/// /dev/shm ([`ShmChannel::create_named`], [`ShmChannel::open`]). One process uses
/// [`ShmChannel::sender`], another [`ShmChannel::receiver`].
#[derive(Debug)]
pub struct ShmChannel {
    region: Region,
    capacity: u64,
    variant: Variant,
    /// The header's `wake_barrier`, read once (a scribble later cannot change the protocol).
    barrier: bool,
    /// This process's futex sleeps on the channel (either end), and those that ran out their
    /// liveness slice although their condition held by then: a wake the peer should have
    /// sent and did not, or one that crossed the timeout (tests).
    sleeps: AtomicU64,
    late_wakes: AtomicU64,
}

fn round16(n: u64) -> u64 {
    (n + RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1)
}

/// Bytes a record of `len` payload bytes takes in the ring.
fn record_len(len: u64) -> u64 {
    RECORD_HEADER + round16(len)
}

/// True while `pid` exists and is not a zombie (an exited child not yet reaped). Reads
/// `/proc/<pid>/stat` without allocating: a forked child of a threaded process may call it.
fn alive(pid: u32) -> bool {
    use std::io::Write;
    let mut path = [0u8; 32];
    let mut cursor = std::io::Cursor::new(&mut path[..]);
    if write!(cursor, "/proc/{pid}/stat\0").is_err() {
        return false;
    }
    let len = cursor.position() as usize;
    let Ok(path) = std::ffi::CStr::from_bytes_with_nul(&path[..len]) else {
        return false;
    };
    let Ok(fd) = rustix::fs::open(path, rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty())
    else {
        return false;
    };
    let mut stat = [0u8; 512];
    let Ok(n) = rustix::io::read(&fd, &mut stat) else {
        return false;
    };
    let stat = &stat[..n];
    // The state is the first field after the last ')' (the command name may contain any byte).
    match stat.iter().rposition(|&b| b == b')') {
        Some(i) => stat[i + 1..].iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'Z'),
        None => false,
    }
}

fn ring_geometry(options: &ChannelOptions) -> Result<u64, IpcError> {
    let capacity = (options.capacity.clamp(4096, 1 << 34) as u64).next_power_of_two();
    if options.max_message == 0 || options.max_message as u64 > capacity / 4 {
        return Err(IpcError::Create(format!(
            "max_message {} must be 1 to a quarter of the {capacity}-byte ring",
            options.max_message
        )));
    }
    Ok(capacity)
}

fn write_header(map: &rtlab_sys::mem::AnonMapping, capacity: u64, options: &ChannelOptions) {
    let header = Header {
        magic: MAGIC,
        capacity,
        max_message: options.max_message as u64,
        variant: options.variant.code(),
        creator_pid: std::process::id() as u64,
        wake_barrier: rtlab_sys::membarrier::global_expedited_supported() as u64,
        _pad0: [0; 2],
        head: AtomicU64::new(0),
        _pad1: [0; 7],
        tail: AtomicU64::new(0),
        _pad2: [0; 7],
        consumer_waiting: AtomicU32::new(0),
        producer_waiting: AtomicU32::new(0),
        consumer_pid: AtomicU32::new(0),
        _pad3: [0; 13],
        producer_pids: [const { AtomicU32::new(0) }; MAX_PRODUCERS],
        producer_lock: RobustMutex::new_shared(),
    };
    // SAFETY: the mapping is page aligned, at least HEADER_LEN bytes, and not yet shared.
    unsafe { (map.as_ptr() as *mut Header).write(header) };
}

impl ShmChannel {
    /// An spsc channel in anonymous shared memory (share it by `fork`) whose ring holds
    /// `capacity` bytes (rounded up to a power of two, at least 4 KiB) and whose messages
    /// carry at most `max_message` bytes (at most a quarter of the ring, so several fit).
    pub fn create(capacity: usize, max_message: usize) -> Result<Self, IpcError> {
        Self::create_anonymous(&ChannelOptions::new(capacity, max_message))
    }

    /// A channel in anonymous shared memory, as `options` say.
    pub fn create_anonymous(options: &ChannelOptions) -> Result<Self, IpcError> {
        let capacity = ring_geometry(options)?;
        let region = Region::anonymous(HEADER_LEN + capacity as usize)?;
        write_header(&region.map, capacity, options);
        Ok(Self::mapped(
            region,
            capacity,
            options.variant,
            rtlab_sys::membarrier::global_expedited_supported(), // as write_header wrote
        ))
    }

    /// A channel named `/dev/shm/<name>` (`name` may start with `/`), created with permission
    /// `options.mode` (0600 by default). A channel of that name left by a crashed run (its
    /// creator and every attached process dead) is removed and created anew; one still in use
    /// gives [`IpcError::Busy`]. The name is removed when this value is dropped by the
    /// creating process.
    pub fn create_named(name: &str, options: &ChannelOptions) -> Result<Self, IpcError> {
        let capacity = ring_geometry(options)?;
        let region = Region::create_named(
            name,
            HEADER_LEN + capacity as usize,
            options.mode,
            |map| write_header(map, capacity, options),
            |existing| {
                // Not even our magic: someone else's object; leave it alone.
                if ShmChannel::magic_of(existing).is_some_and(|m| m != MAGIC) {
                    return Err(IpcError::Busy(format!(
                        "/dev/shm/{} exists and is not an rtlab channel",
                        name.trim_start_matches('/')
                    )));
                }
                match ShmChannel::validate(existing) {
                    Ok(_) => ShmChannel::user_of(existing).map_or(Ok(()), |pid| {
                        Err(IpcError::Busy(format!("'{name}' is in use by pid {pid}")))
                    }),
                    Err(_) => Ok(()), // our format but garbled: a crash while creating
                }
            },
        )?;
        Ok(Self::mapped(
            region,
            capacity,
            options.variant,
            rtlab_sys::membarrier::global_expedited_supported(), // as write_header wrote
        ))
    }

    /// This process's handle on a mapped channel whose header says these.
    fn mapped(region: Region, capacity: u64, variant: Variant, barrier: bool) -> Self {
        ShmChannel {
            region,
            capacity,
            variant,
            barrier,
            sleeps: AtomicU64::new(0),
            late_wakes: AtomicU64::new(0),
        }
    }

    /// Opens the named channel another process created (validating everything it reads).
    pub fn open(name: &str) -> Result<Self, IpcError> {
        let region = Region::open_named(name)?;
        let (capacity, variant, barrier) = Self::validate(&region)?;
        Ok(Self::mapped(region, capacity, variant, barrier))
    }

    /// Checks a mapped header before trusting its geometry.
    /// The format tag of `region` (None: shorter than a channel header).
    fn magic_of(region: &Region) -> Option<u64> {
        if region.len() < HEADER_LEN {
            return None;
        }
        let h = region.as_ptr() as *const Header;
        // SAFETY: at least HEADER_LEN mapped bytes; volatile because another process may be
        // writing the header.
        Some(unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*h).magic)) })
    }

    fn validate(region: &Region) -> Result<(u64, Variant, bool), IpcError> {
        if region.len() < HEADER_LEN {
            return Err(IpcError::Corrupt("shorter than a channel header".into()));
        }
        // SAFETY: at least HEADER_LEN mapped bytes; the plain fields are read once, here.
        let h = unsafe { &*(region.as_ptr() as *const Header) };
        // SAFETY: as above; volatile because another process may be writing them.
        let (magic, capacity, max, variant, barrier) = unsafe {
            (
                std::ptr::read_volatile(&h.magic),
                std::ptr::read_volatile(&h.capacity),
                std::ptr::read_volatile(&h.max_message),
                std::ptr::read_volatile(&h.variant),
                std::ptr::read_volatile(&h.wake_barrier),
            )
        };
        if magic != MAGIC {
            return Err(IpcError::Corrupt("not an rtlab channel (magic)".into()));
        }
        if !capacity.is_power_of_two()
            || capacity < 4096
            || HEADER_LEN as u64 + capacity != region.len() as u64
            || max == 0
            || max > capacity / 4
        {
            return Err(IpcError::Corrupt(format!(
                "geometry: capacity {capacity}, max_message {max}, {} bytes mapped",
                region.len()
            )));
        }
        let variant = match variant {
            0 => Variant::Spsc,
            1 => Variant::Mpsc,
            v => return Err(IpcError::Corrupt(format!("variant {v}"))),
        };
        let barrier = match barrier {
            0 => false,
            1 => true,
            b => return Err(IpcError::Corrupt(format!("wake barrier {b}"))),
        };
        Ok((capacity, variant, barrier))
    }

    /// A live process attached to (or that created) the channel in `region`, if any.
    fn user_of(region: &Region) -> Option<u32> {
        // SAFETY: validated to hold a whole header.
        let h = unsafe { &*(region.as_ptr() as *const Header) };
        let creator = h.creator_pid as u32;
        std::iter::once(creator)
            .chain(std::iter::once(h.consumer_pid.load(Ordering::Relaxed)))
            .chain(h.producer_pids.iter().map(|p| p.load(Ordering::Relaxed)))
            .find(|&pid| pid != 0 && alive(pid))
    }

    fn header(&self) -> &Header {
        // SAFETY: written in `create*` or validated in `open`; the mapping lives as long as
        // `self`; all fields another process may change are atomics or re-checked.
        unsafe { &*(self.region.as_ptr() as *const Header) }
    }

    fn ring(&self) -> *mut u8 {
        self.region.as_ptr().wrapping_add(HEADER_LEN)
    }

    /// The stamp of the record at ring offset `offset` (16-aligned, below the capacity).
    fn stamp(&self, offset: u64) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(RECORD_ALIGN) && offset < self.capacity);
        // SAFETY: the ring starts 64-aligned (the mapping is page aligned, the header a
        // multiple of 64), so a 16-aligned offset below the capacity holds an aligned u64
        // inside the mapping, which lives as long as `self`.
        unsafe { &*(self.ring().add(offset as usize) as *const AtomicU64) }
    }

    /// Asks for the cache line after the one that holds ring offset `offset`, while the
    /// consumer polls the stamp there: a record longer than what its first line holds
    /// continues in that line, which the producer writes first, so it arrives while the stamp
    /// is awaited rather than after it (one transfer between CPUs fewer; RESULTS, issue 18).
    /// A prefetch: not a read the program sees, so no race with the producer's writes.
    #[inline]
    fn pull_next_line(&self, offset: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let next = ((offset | 63) + 1) % self.capacity;
            // SAFETY: a prefetch never faults and returns nothing; the address is in the ring.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    self.ring().add(next as usize) as *const i8,
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = offset;
    }

    /// The length field of the record at `offset` (16-aligned, below the capacity).
    fn length(&self, offset: u64) -> *mut u32 {
        debug_assert!(offset.is_multiple_of(RECORD_ALIGN) && offset < self.capacity);
        self.ring().wrapping_add((offset + LENGTH_AT) as usize) as *mut u32
    }

    /// spsc or mpsc.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// `/dev/shm/...` when this process created the channel under a name.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.region.owned_path()
    }

    /// Checks the parts of the header the other side could have scribbled on.
    fn check_header(&self) -> Result<(), IpcError> {
        let h = self.header();
        // SAFETY: plain fields inside the live mapping; volatile as another process may write.
        let (magic, capacity) = unsafe {
            (
                std::ptr::read_volatile(&h.magic),
                std::ptr::read_volatile(&h.capacity),
            )
        };
        if magic != MAGIC || capacity != self.capacity {
            return Err(IpcError::Corrupt("header overwritten".into()));
        }
        Ok(())
    }

    fn producer_slots(&self) -> &[AtomicU32] {
        let all = &self.header().producer_pids;
        match self.variant {
            Variant::Spsc => &all[..1],
            Variant::Mpsc => &all[..],
        }
    }

    /// Takes a slot for this process: one it already holds, a free one, or one whose process
    /// died (a new peer re-attaching).
    fn attach(slots: &[AtomicU32], what: &str) -> Result<(), IpcError> {
        let me = std::process::id();
        if slots.iter().any(|p| p.load(Ordering::Relaxed) == me) {
            return Ok(());
        }
        for slot in slots {
            let pid = slot.load(Ordering::Relaxed);
            if (pid == 0 || !alive(pid))
                && slot
                    .compare_exchange(pid, me, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                return Ok(());
            }
        }
        let pids: Vec<String> = slots
            .iter()
            .map(|p| p.load(Ordering::Relaxed).to_string())
            .collect();
        Err(IpcError::Busy(format!(
            "the {what} end is held by live pid {}",
            pids.join(", ")
        )))
    }

    /// The producing end for this process. `Busy` if another live process holds it (spsc) or
    /// all [`MAX_PRODUCERS`] slots are taken (mpsc); a dead holder's slot is taken over.
    pub fn sender(&self) -> Result<Sender<'_>, IpcError> {
        // A producer sleeping on a full ring must be able to make the consumer's CPU fence.
        if self.barrier && !rtlab_sys::membarrier::global_expedited_supported() {
            return Err(IpcError::Create(
                "this process cannot call membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), which \
                 the channel's wake protocol needs (a seccomp filter?)"
                    .into(),
            ));
        }
        Self::attach(self.producer_slots(), "producer")?;
        Ok(Sender::new(self))
    }

    /// The consuming end for this process (`Busy` while another live process holds it).
    pub fn receiver(&self) -> Result<Receiver<'_>, IpcError> {
        // Registered before the first consume that leaves out its fence.
        if self.barrier {
            rtlab_sys::membarrier::register_global_expedited().map_err(|e| {
                IpcError::Create(format!(
                    "{e}: the channel's wake protocol needs it (a seccomp filter?)"
                ))
            })?;
        }
        Self::attach(
            std::slice::from_ref(&self.header().consumer_pid),
            "consumer",
        )?;
        Ok(Receiver::new(self))
    }

    /// A one-line snapshot of the shared state (positions, waiting flags, attached pids, the
    /// producers' lock word), for an error report when a peer seems stuck.
    pub fn state(&self) -> String {
        let h = self.header();
        let (head, tail) = (
            h.head.load(Ordering::Relaxed),
            h.tail.load(Ordering::Relaxed),
        );
        let pids: Vec<String> = self
            .producer_slots()
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .filter(|&p| p != 0)
            .map(|p| p.to_string())
            .collect();
        format!(
            "head {head}, tail {tail} ({} bytes queued), consumer waiting {}, producer \
             waiting {}, consumer pid {}, producer pids [{}], producers' lock {:?}",
            head.wrapping_sub(tail),
            h.consumer_waiting.load(Ordering::Relaxed),
            h.producer_waiting.load(Ordering::Relaxed),
            h.consumer_pid.load(Ordering::Relaxed),
            pids.join(", "),
            h.producer_lock,
        )
    }

    /// The consumer's pid once a receiver was created in some process, else 0.
    pub fn receiver_attached_pid(&self) -> u32 {
        self.header().consumer_pid.load(Ordering::Relaxed)
    }

    /// Largest payload.
    pub fn max_message(&self) -> usize {
        // SAFETY: plain field inside the live mapping; clamped, so a scribble cannot widen it.
        let max = unsafe { std::ptr::read_volatile(&self.header().max_message) };
        max.min(self.capacity / 4) as usize
    }

    /// True when every producer that ever attached has died (none attached: false).
    fn producers_dead(&self) -> bool {
        let mut any = false;
        for slot in self.producer_slots() {
            let pid = slot.load(Ordering::Relaxed);
            if pid != 0 {
                if alive(pid) {
                    return false;
                }
                any = true;
            }
        }
        any
    }

    fn consumer_dead(&self) -> bool {
        let pid = self.header().consumer_pid.load(Ordering::Relaxed);
        pid != 0 && !alive(pid)
    }

    /// Waits (after the short spin found nothing) until `ready()`, `deadline`, or the peer's
    /// death: on the futex `word` while it is 1, or spinning when `busy_poll`.
    fn wait(
        &self,
        word: &AtomicU32,
        ready: &dyn Fn() -> bool,
        deadline: Option<u64>,
        busy_poll: bool,
        barrier: bool,
        peer_dead: &dyn Fn(&Self) -> bool,
    ) -> Result<(), IpcError> {
        let now = monotonic_now_ns();
        if deadline.is_some_and(|d| now >= d) {
            return Err(IpcError::TimedOut);
        }
        let until = deadline.map_or(now + LIVENESS_SLICE_NS, |d| d.min(now + LIVENESS_SLICE_NS));
        if busy_poll {
            if spin_until(ready, until - now) {
                return Ok(());
            }
        } else {
            word.store(1, Ordering::Relaxed);
            // With `barrier` the other side does not fence after it moves: the membarrier
            // makes its CPU do so (if the call failed, which registration ruled out, a missed
            // wake costs at most the liveness slice).
            if !barrier || rtlab_sys::membarrier::global_expedited().is_err() {
                fence(Ordering::SeqCst);
            }
            if ready() {
                word.store(0, Ordering::Relaxed);
                return Ok(());
            }
            self.sleeps.fetch_add(1, Ordering::Relaxed);
            let woke = futex::wait_until(word, Scope::Shared, 1, Some(until));
            // Woken by a slice timeout the flag is still set: clear it, or every operation of
            // the peer would pay for a wake nobody needs.
            word.store(0, Ordering::Relaxed);
            if woke != Wait::TimedOut {
                return Ok(());
            }
            if ready() {
                self.late_wakes.fetch_add(1, Ordering::Relaxed);
            }
        }
        if peer_dead(self) {
            return Err(IpcError::PeerDied);
        }
        Ok(())
    }

    /// Wakes the side sleeping on `word` (called after a publish or consume and a SeqCst fence).
    fn wake_sleeper(&self, word: &AtomicU32) {
        if word.load(Ordering::Relaxed) == 1 {
            word.store(0, Ordering::Relaxed);
            futex::wake(word, Scope::Shared, 1);
        }
    }

    /// For a binding that sends or receives in its own language (the Java binding's fast
    /// path; see the module docs for the protocol): after it published a record (`consumer`
    /// true) or consumed one, and then fenced (SeqCst), wakes the other side if it sleeps.
    pub fn wake_peer_of(&self, consumer: bool) {
        let h = self.header();
        fence(Ordering::SeqCst);
        self.wake_sleeper(if consumer {
            &h.consumer_waiting
        } else {
            &h.producer_waiting
        });
    }

    /// Where everything is, for a binding that reads and writes the ring itself.
    pub fn raw_layout(&self) -> RawLayout {
        RawLayout {
            format: FORMAT,
            spsc: self.variant == Variant::Spsc,
            base: self.region.as_ptr(),
            len: self.region.len(),
            magic: MAGIC,
            capacity: self.capacity,
            max_message: self.max_message() as u64,
            ring_at: HEADER_LEN,
            head_at: std::mem::offset_of!(Header, head),
            tail_at: std::mem::offset_of!(Header, tail),
            consumer_waiting_at: std::mem::offset_of!(Header, consumer_waiting),
            producer_waiting_at: std::mem::offset_of!(Header, producer_waiting),
            consumer_fenceless: self.barrier,
        }
    }

    fn lock_producers(&self, deadline: Option<u64>) -> Result<RobustGuard<'_>, IpcError> {
        // A producer that died holding it never published the record it was writing, so the
        // ring is consistent; the bytes past head are simply written over.
        // SAFETY: the mutex lives in the mapping, which outlives every guard (they borrow
        // `self`) and never moves.
        let mutex = unsafe { std::pin::Pin::new_unchecked(&self.header().producer_lock) };
        crate::lock_robust(mutex, deadline)
    }
}

mod ends;
pub use ends::{Receiver, Sender};

#[cfg(test)]
mod tests;

/// The shared-memory boundary under arbitrary scribbles (proptest).
#[cfg(test)]
mod fuzz;

/// The sleep/wake protocol under a model checker (loom), with the barrier and without.
#[cfg(test)]
mod wake_model;
