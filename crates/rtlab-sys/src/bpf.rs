//! The `bpf(2)` system call, as much of it as a flight recorder needs: array maps that user
//! space maps and reads in place (no system call per read), loading a raw-tracepoint program
//! from instructions assembled at run time (no compiler, no object files), attaching it.
//!
//! C: `syscall(SYS_bpf, cmd, &attr, sizeof attr)` with `union bpf_attr` from `<linux/bpf.h>`.

use crate::SysError;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_MAP_DELETE_ELEM: i32 = 3;
const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_PROG_LOAD: i32 = 5;
const BPF_RAW_TRACEPOINT_OPEN: i32 = 17;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_STACK_TRACE: u32 = 7;
const BPF_F_MMAPABLE: u32 = 1 << 10;
const BPF_PROG_TYPE_KPROBE: u32 = 2;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_TRACE_RAW_TP: u32 = 23;
const BPF_TRACE_FENTRY: u32 = 24;
const BPF_TRACE_FEXIT: u32 = 25;

/// One BPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high one.
    pub regs: u8,
    /// Offset.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl Insn {
    /// An instruction from its parts.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (dst & 0xf) | (src << 4),
            off,
            imm,
        }
    }
}

/// `union bpf_attr`, as a zeroed 128-byte block the commands fill at their offsets.
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(mut self, off: usize, v: u32) -> Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, off: usize, v: u64) -> Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

#[allow(unsafe_code)]
fn bpf(cmd: i32, attr: &mut Attr, what: &str) -> Result<i64, SysError> {
    // SAFETY: attr is a valid, writable 128-byte block; pointers inside it were set by the
    // callers to memory that outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            std::mem::size_of::<Attr>(),
        )
    };
    if r < 0 {
        return Err(SysError::from_io(what, std::io::Error::last_os_error()));
    }
    Ok(r)
}

#[allow(unsafe_code)]
fn owned(fd: i64) -> OwnedFd {
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// A map (`BPF_MAP_CREATE`).
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    key_size: u32,
    value_size: u32,
    entries: u32,
}

impl Map {
    /// An array of `entries` values of `value_size` bytes (zeroed); `mmapable` ones can be
    /// mapped with [`Map::map_read`].
    pub fn array(value_size: u32, entries: u32, mmapable: bool) -> Result<Map, SysError> {
        let mut a = Attr::new()
            .u32(0, BPF_MAP_TYPE_ARRAY)
            .u32(4, 4)
            .u32(8, value_size)
            .u32(12, entries)
            .u32(16, if mmapable { BPF_F_MMAPABLE } else { 0 });
        let fd = bpf(BPF_MAP_CREATE, &mut a, "bpf(BPF_MAP_CREATE, array)")?;
        Ok(Map {
            fd: owned(fd),
            key_size: 4,
            value_size,
            entries,
        })
    }

    /// A hash map of at most `entries` keys of `key_size` bytes to values of `value_size`
    /// (a set, with 1-byte values: a program's lookup finds a key or not).
    pub fn hash(key_size: u32, value_size: u32, entries: u32) -> Result<Map, SysError> {
        let mut a = Attr::new()
            .u32(0, BPF_MAP_TYPE_HASH)
            .u32(4, key_size)
            .u32(8, value_size)
            .u32(12, entries);
        let fd = bpf(BPF_MAP_CREATE, &mut a, "bpf(BPF_MAP_CREATE, hash)")?;
        Ok(Map {
            fd: owned(fd),
            key_size,
            value_size,
            entries,
        })
    }

    /// A map of kernel stacks of at most `depth` return addresses (u64 each), at most
    /// `entries` of them, filled by programs' `bpf_get_stackid` (which returns the key).
    pub fn stack_trace(depth: u32, entries: u32) -> Result<Map, SysError> {
        let value_size = depth * 8;
        let mut a = Attr::new()
            .u32(0, BPF_MAP_TYPE_STACK_TRACE)
            .u32(4, 4)
            .u32(8, value_size)
            .u32(12, entries);
        let fd = bpf(BPF_MAP_CREATE, &mut a, "bpf(BPF_MAP_CREATE, stack trace)")?;
        Ok(Map {
            fd: owned(fd),
            key_size: 4,
            value_size,
            entries,
        })
    }

    /// The value at `key` (exactly the key size), None when absent.
    pub fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>, SysError> {
        if key.len() != self.key_size as usize {
            return Err(SysError::Invalid {
                what: format!("bpf map lookup of a {}-byte key", key.len()),
            });
        }
        let mut value = vec![0u8; self.value_size as usize];
        let mut a = Attr::new()
            .u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64)
            .u64(16, value.as_mut_ptr() as u64);
        match bpf(BPF_MAP_LOOKUP_ELEM, &mut a, "bpf(BPF_MAP_LOOKUP_ELEM)") {
            Ok(_) => Ok(Some(value)),
            Err(SysError::Io { ref source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Sets `key` (exactly the key size) to `value` in a hash map (inserted if new).
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<(), SysError> {
        if key.len() != self.key_size as usize || value.len() != self.value_size as usize {
            return Err(SysError::Invalid {
                what: format!("bpf map insert of a {}-byte key", key.len()),
            });
        }
        let mut a = Attr::new()
            .u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64)
            .u64(16, value.as_ptr() as u64);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a, "bpf(BPF_MAP_UPDATE_ELEM)").map(|_| ())
    }

    /// Removes `key` from a hash map (absent: nothing to do).
    pub fn remove(&self, key: &[u8]) -> Result<(), SysError> {
        if key.len() != self.key_size as usize {
            return Err(SysError::Invalid {
                what: format!("bpf map delete of a {}-byte key", key.len()),
            });
        }
        let mut a = Attr::new()
            .u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64);
        match bpf(BPF_MAP_DELETE_ELEM, &mut a, "bpf(BPF_MAP_DELETE_ELEM)") {
            Err(SysError::Io { ref source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => {
                Ok(())
            }
            r => r.map(|_| ()),
        }
    }

    /// Maps an array created `mmapable`, read-only.
    #[allow(unsafe_code)]
    pub fn map_read(&self) -> Result<MappedArray, SysError> {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        let page = rustix::param::page_size();
        let bytes = (self.value_size as usize).div_ceil(8) * 8 * self.entries as usize;
        let len = bytes.div_ceil(page) * page;
        // SAFETY: the descriptor is a live map owned by self.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd.as_raw_fd()) };
        // SAFETY: a fresh read-only shared mapping at an address the kernel picks.
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| SysError::from_errno("mmap(bpf array)", e))?;
        Ok(MappedArray {
            ptr: ptr.cast::<u8>(),
            len,
        })
    }

    /// Writes `value` (exactly the map's value size) at index `key`.
    pub fn update(&self, key: u32, value: &[u8]) -> Result<(), SysError> {
        if value.len() != self.value_size as usize || key >= self.entries {
            return Err(SysError::Invalid {
                what: format!("bpf map update at {key} of {} bytes", value.len()),
            });
        }
        let mut a = Attr::new()
            .u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, &key as *const u32 as u64)
            .u64(16, value.as_ptr() as u64);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a, "bpf(BPF_MAP_UPDATE_ELEM)").map(|_| ())
    }

    /// The descriptor, for `BPF_PSEUDO_MAP_FD` loads in programs.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

/// Why a program was refused: the error, and the verifier's log.
#[derive(Debug)]
pub struct LoadError {
    /// The system call's error.
    pub error: SysError,
    /// The verifier's explanation (may be empty).
    pub log: String,
}

/// A loaded program.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Loads a `BPF_PROG_TYPE_RAW_TRACEPOINT` program (GPL: the helpers it calls need it).
    pub fn load_raw_tracepoint(insns: &[Insn]) -> Result<Program, LoadError> {
        Self::load(insns, BPF_PROG_TYPE_RAW_TRACEPOINT, None)
    }

    /// Loads a `BPF_PROG_TYPE_KPROBE` program (its context the probed task's registers,
    /// `struct pt_regs`), for a uprobe ([`crate::perf::uprobe`]).
    pub fn load_kprobe(insns: &[Insn]) -> Result<Program, LoadError> {
        Self::load(insns, BPF_PROG_TYPE_KPROBE, None)
    }

    /// The descriptor, for attaching to a perf event ([`crate::perf::attach_bpf`]).
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Loads a BTF-typed raw-tracepoint program (`tp_btf`): its pointer arguments are typed,
    /// so it reads kernel structures with plain loads instead of `bpf_probe_read_kernel`.
    /// `typedef_id` is the BTF id of the tracepoint's `btf_trace_<name>` typedef in vmlinux.
    pub fn load_btf_raw_tracepoint(insns: &[Insn], typedef_id: u32) -> Result<Program, LoadError> {
        Self::load(
            insns,
            BPF_PROG_TYPE_TRACING,
            Some((BPF_TRACE_RAW_TP, typedef_id)),
        )
    }

    /// Loads a program run at the entry (`exit: false`) or the return of the kernel function
    /// whose BTF id (`BTF_KIND_FUNC` in vmlinux) is `func_id`: its context is the function's
    /// arguments as u64s, followed at its return by the return value. Attached with
    /// [`Program::attach_raw_tracepoint`]`(None)`; needs the kernel's BPF trampolines.
    pub fn load_function_probe(
        insns: &[Insn],
        func_id: u32,
        exit: bool,
    ) -> Result<Program, LoadError> {
        let attach = if exit {
            BPF_TRACE_FEXIT
        } else {
            BPF_TRACE_FENTRY
        };
        Self::load(insns, BPF_PROG_TYPE_TRACING, Some((attach, func_id)))
    }

    fn load(
        insns: &[Insn],
        prog_type: u32,
        btf_target: Option<(u32, u32)>,
    ) -> Result<Program, LoadError> {
        let license = c"GPL";
        let mut log = vec![0u8; 64 * 1024];
        let mut a = Attr::new()
            .u32(0, prog_type)
            .u32(4, insns.len() as u32)
            .u64(8, insns.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(24, 1)
            .u32(28, log.len() as u32)
            .u64(32, log.as_mut_ptr() as u64);
        if let Some((attach, id)) = btf_target {
            a = a.u32(68, attach).u32(108, id);
        }
        let what = match btf_target {
            Some((BPF_TRACE_FENTRY, _)) => "bpf(BPF_PROG_LOAD, fentry)",
            Some((BPF_TRACE_FEXIT, _)) => "bpf(BPF_PROG_LOAD, fexit)",
            None if prog_type == BPF_PROG_TYPE_KPROBE => "bpf(BPF_PROG_LOAD, kprobe)",
            _ => "bpf(BPF_PROG_LOAD, raw_tracepoint)",
        };
        match bpf(BPF_PROG_LOAD, &mut a, what) {
            Ok(fd) => Ok(Program { fd: owned(fd) }),
            Err(error) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                Err(LoadError {
                    error,
                    log: String::from_utf8_lossy(&log[..end]).into_owned(),
                })
            }
        }
    }

    /// Attaches to the raw tracepoint `name` (e.g. `sched_switch`; `None` for a program
    /// loaded with its BTF target); detached when the returned link is dropped.
    pub fn attach_raw_tracepoint(&self, name: Option<&str>) -> Result<OwnedFd, SysError> {
        let what = format!("bpf(BPF_RAW_TRACEPOINT_OPEN, {})", name.unwrap_or("btf"));
        let cname = name
            .map(CString::new)
            .transpose()
            .map_err(|_| SysError::Invalid { what: what.clone() })?;
        let mut a = Attr::new()
            .u64(0, cname.as_ref().map_or(0, |c| c.as_ptr() as u64))
            .u32(8, self.fd.as_raw_fd() as u32);
        Ok(owned(bpf(BPF_RAW_TRACEPOINT_OPEN, &mut a, &what)?))
    }
}

/// A read-only mapping of a `BPF_F_MMAPABLE` array map: the values, contiguous, each rounded
/// up to 8 bytes. Programs write it while it is read: reads are atomic or volatile copies.
#[derive(Debug)]
pub struct MappedArray {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, only read through atomics and volatile copies.
#[allow(unsafe_code)]
unsafe impl Send for MappedArray {}

impl Drop for MappedArray {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing borrows the mapping now.
        let _ = unsafe { rustix::mm::munmap(self.ptr as *mut _, self.len) };
    }
}

impl MappedArray {
    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is mapped (never, for a created map).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The u64 at `offset` (8-aligned), read atomically with acquire ordering.
    #[allow(unsafe_code)]
    pub fn load_u64(&self, offset: usize) -> u64 {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.len,
            "offset {offset} out of the map"
        );
        // SAFETY: in bounds and aligned (the mapping is page-aligned); the kernel side only
        // writes whole u64s here.
        unsafe { (*(self.ptr.add(offset) as *const AtomicU64)).load(Ordering::Acquire) }
    }

    /// Copies `out.len()` bytes from `offset`.
    #[allow(unsafe_code)]
    pub fn copy(&self, offset: usize, out: &mut [u8]) {
        assert!(offset + out.len() <= self.len, "read past the map");
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: in bounds (checked above); volatile because programs write concurrently.
            *b = unsafe { std::ptr::read_volatile(self.ptr.add(offset + i)) };
        }
        std::sync::atomic::fence(Ordering::Acquire);
    }
}

/// Instructions, with the constants the programs use. Only what rtlab's programs need.
pub mod asm {
    use super::Insn;

    /// `r0`..`r10` (`r10`: frame pointer).
    pub const R0: u8 = 0;
    /// Argument 1 / context.
    pub const R1: u8 = 1;
    /// Argument 2.
    pub const R2: u8 = 2;
    /// Argument 3.
    pub const R3: u8 = 3;
    /// Argument 4.
    pub const R4: u8 = 4;
    /// Callee-saved.
    pub const R6: u8 = 6;
    /// Callee-saved.
    pub const R7: u8 = 7;
    /// Callee-saved.
    pub const R8: u8 = 8;
    /// Callee-saved.
    pub const R9: u8 = 9;
    /// The frame pointer (read-only).
    pub const R10: u8 = 10;

    /// Helper numbers (`enum bpf_func_id`).
    pub mod helper {
        /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC).
        pub const KTIME_GET_NS: i32 = 5;
        /// `bpf_get_smp_processor_id`.
        pub const GET_SMP_PROCESSOR_ID: i32 = 8;
        /// `bpf_get_current_pid_tgid`.
        pub const GET_CURRENT_PID_TGID: i32 = 14;
        /// `bpf_get_current_comm` (the current task's name, NUL-padded).
        pub const GET_CURRENT_COMM: i32 = 16;
        /// `bpf_get_current_task` (the current `task_struct`'s address).
        pub const GET_CURRENT_TASK: i32 = 35;
        /// `bpf_probe_read_kernel`.
        pub const PROBE_READ_KERNEL: i32 = 113;
        /// `bpf_probe_read_user`.
        pub const PROBE_READ_USER: i32 = 112;
        /// `bpf_map_lookup_elem` (inlined by the verifier for arrays).
        pub const MAP_LOOKUP_ELEM: i32 = 1;
        /// `bpf_map_update_elem`.
        pub const MAP_UPDATE_ELEM: i32 = 2;
        /// `bpf_get_stackid` (the current task's kernel stack, stored in a stack map).
        pub const GET_STACKID: i32 = 27;
    }

    const ALU64: u8 = 0x07;
    const JMP: u8 = 0x05;
    const X: u8 = 0x08;
    const K: u8 = 0x00;

    /// `dst = src`.
    pub const fn mov(dst: u8, src: u8) -> Insn {
        Insn::new(ALU64 | 0xb0 | X, dst, src, 0, 0)
    }
    /// `dst = imm`.
    pub const fn mov_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(ALU64 | 0xb0 | K, dst, 0, 0, imm)
    }
    /// `dst += imm`.
    pub const fn add_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(ALU64 | K, dst, 0, 0, imm)
    }
    /// `dst &= imm`.
    pub const fn and_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(ALU64 | 0x50 | K, dst, 0, 0, imm)
    }
    /// `dst += src`.
    pub const fn add(dst: u8, src: u8) -> Insn {
        Insn::new(ALU64 | X, dst, src, 0, 0)
    }
    /// `dst -= src`.
    pub const fn sub(dst: u8, src: u8) -> Insn {
        Insn::new(ALU64 | 0x10 | X, dst, src, 0, 0)
    }
    /// `dst *= imm`.
    pub const fn mul_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(ALU64 | 0x20 | K, dst, 0, 0, imm)
    }
    /// `dst >>= imm` (logical).
    pub const fn rsh_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(ALU64 | 0x70 | K, dst, 0, 0, imm)
    }
    /// `dst >>= src` (logical).
    pub const fn rsh(dst: u8, src: u8) -> Insn {
        Insn::new(ALU64 | 0x70 | X, dst, src, 0, 0)
    }
    /// `dst = imm64` (two instructions).
    pub const fn ld_imm64(dst: u8, imm: u64) -> [Insn; 2] {
        [
            Insn::new(0x18, dst, 0, 0, imm as u32 as i32),
            Insn::new(0, 0, 0, 0, (imm >> 32) as u32 as i32),
        ]
    }
    /// `dst = &map` (two instructions, `BPF_PSEUDO_MAP_FD`).
    pub const fn ld_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
        [Insn::new(0x18, dst, 1, 0, fd), Insn::new(0, 0, 0, 0, 0)]
    }
    /// `dst = *(u64 *)(src + off)`.
    pub const fn ldx64(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x61 | 0x18, dst, src, off, 0)
    }
    /// `dst = *(u32 *)(src + off)`.
    pub const fn ldx32(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x61, dst, src, off, 0)
    }
    /// `*(u64 *)(dst + off) = src`.
    pub const fn stx64(dst: u8, off: i16, src: u8) -> Insn {
        Insn::new(0x63 | 0x18, dst, src, off, 0)
    }
    /// `*(u32 *)(dst + off) = src`.
    pub const fn stx32(dst: u8, off: i16, src: u8) -> Insn {
        Insn::new(0x63, dst, src, off, 0)
    }
    /// `*(u32 *)(dst + off) = imm`.
    pub const fn st32(dst: u8, off: i16, imm: i32) -> Insn {
        Insn::new(0x62, dst, 0, off, imm)
    }
    /// `*(u64 *)(dst + off) = imm` (sign-extended).
    pub const fn st64(dst: u8, off: i16, imm: i32) -> Insn {
        Insn::new(0x7a, dst, 0, off, imm)
    }
    /// `src = atomic_fetch_add((u64 *)(dst + off), src)`: the old value lands in `src`.
    pub const fn atomic_fetch_add64(dst: u8, off: i16, src: u8) -> Insn {
        Insn::new(0xdb, dst, src, off, 0x01)
    }
    /// `call helper`.
    pub const fn call(helper: i32) -> Insn {
        Insn::new(JMP | 0x80, 0, 0, 0, helper)
    }
    /// `call kfunc` (a kernel function by its BTF id in vmlinux).
    pub const fn kfunc_call(btf_id: i32) -> Insn {
        Insn::new(JMP | 0x80, 0, 2, 0, btf_id)
    }
    /// `if dst != src goto +off`.
    pub const fn jne(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(JMP | 0x50 | X, dst, src, off, 0)
    }
    /// `goto +off`.
    pub const fn ja(off: i16) -> Insn {
        Insn::new(JMP, 0, 0, off, 0)
    }
    /// `if dst == imm goto +off`.
    pub const fn jeq_imm(dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(JMP | 0x10 | K, dst, 0, off, imm)
    }
    /// `if dst != imm goto +off`.
    pub const fn jne_imm(dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(JMP | 0x50 | K, dst, 0, off, imm)
    }
    /// `if dst > imm goto +off` (unsigned).
    pub const fn jgt_imm(dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(JMP | 0x20 | K, dst, 0, off, imm)
    }
    /// `exit`.
    pub const fn exit() -> Insn {
        Insn::new(JMP | 0x90, 0, 0, 0, 0)
    }
}
