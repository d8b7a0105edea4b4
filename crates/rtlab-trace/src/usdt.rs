//! USDT probe sites (SystemTap's `.note.stapsdt`, which DTrace-style probes compiled into a
//! program or library leave in its ELF file: HotSpot's `hotspot` and `hs_private` probes in
//! libjvm.so), read from the file itself: no tool, no agent, nothing asked of the program.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Why a JVM's probes were not attached.
#[derive(Debug)]
pub enum ProbeError {
    /// Its libjvm.so could not be read.
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// Not an ELF file whose notes this reads (why).
    NotElf { path: PathBuf, why: &'static str },
    /// No safepoint probes in it (stripped, or not HotSpot's).
    NoSafepointProbes(PathBuf),
    /// No clock function in its symbol table (stripped).
    NoClock(PathBuf),
    /// Probes in every process asked for, in a file not root's (or writable by others).
    NotRoots(PathBuf),
    /// The kernel refused a probe's program (the verifier's last line).
    Load {
        probe: &'static str,
        error: rtlab_sys::SysError,
        verifier: String,
    },
    /// The uprobe could not be placed or attached.
    Attach(rtlab_sys::SysError),
    /// Its tracefs event could not be enabled.
    Enable {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            ProbeError::NotElf { path, why } => write!(f, "{}: {why}", path.display()),
            ProbeError::NoSafepointProbes(path) => write!(
                f,
                "{}: no HotSpot safepoint probes (a stripped or a non-HotSpot libjvm.so)",
                path.display()
            ),
            ProbeError::NoClock(path) => write!(
                f,
                "{}: no os::javaTimeNanos in its symbol table (a stripped libjvm.so)",
                path.display()
            ),
            ProbeError::NotRoots(path) => write!(
                f,
                "{}: not installed by root (another user owns it or may write it): probed only \
                 in a watched process that maps it, never in every process",
                path.display()
            ),
            ProbeError::Load {
                probe,
                error,
                verifier,
            } => write!(f, "{error} ({probe}): {verifier}"),
            ProbeError::Attach(e) => write!(f, "{e}"),
            ProbeError::Enable { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for ProbeError {}

impl ProbeError {
    /// The kernel refuses uprobes (or their programs) to this process: no file would do.
    pub fn not_permitted(&self) -> bool {
        match self {
            ProbeError::Attach(e) | ProbeError::Load { error: e, .. } => e.is_permission(),
            _ => false,
        }
    }

    /// The file itself is the reason (unreadable, not an ELF file rtlab reads, no probes):
    /// the same for any process that maps it.
    pub fn is_the_files(&self) -> bool {
        matches!(
            self,
            ProbeError::Io { .. } | ProbeError::NotElf { .. } | ProbeError::NoSafepointProbes(_)
        )
    }
}

/// One probe site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub provider: String,
    pub name: String,
    /// The probed instruction's offset in the file (where a uprobe goes).
    pub offset: u64,
    /// Its semaphore's address (0: none; the probe always fires).
    pub semaphore: u64,
    /// Its arguments, as the note gives them (`8@%r14 8@%r15 -4@%eax`).
    pub args: Vec<Arg>,
}

/// Where a probe's argument is, at the probed instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// In a register: its offset in x86-64 `struct pt_regs`; `size` bytes (negative:
    /// signed).
    Register { regs_offset: i16, size: i8 },
    /// A constant.
    Constant(i64),
    /// Elsewhere (a memory operand): not read.
    Unsupported,
}

/// The most read of a file at once (its section and program headers, its section names,
/// its symbol tables: a few MB in a libjvm.so).
const MAX_READ: usize = 64 << 20;
/// The most probe notes read (a libjvm.so's are under 64 kB), and the most sites kept of
/// them: a file of millions of notes is refused, not parsed into memory.
const MAX_NOTES: usize = 1 << 20;
const MAX_SITES: usize = 1024;

/// A libjvm.so opened once, as a watched process maps it (or as the JVM rtlab starts will):
/// its notes, its symbols and the kernel's probes all go through this descriptor
/// (`/proc/self/fd/N` for the kernel), never through its path again. Whoever owns the file
/// can swap its path for another file at any moment; a probe's offset means something only
/// in the file it was read from.
#[derive(Debug, Clone)]
pub struct Library {
    /// Its path as the process names it (for what rtlab says of it).
    pub shown: PathBuf,
    file: std::sync::Arc<std::fs::File>,
    /// Its device and inode (one file however many processes map it).
    pub id: (u64, u64),
    /// Owned by root and writable by no one else: what root installed, whose notes are
    /// root's own word. Only such a file is probed in every process that maps it; any other
    /// only in the watched process that maps it.
    pub root_owned: bool,
}

impl Library {
    /// The libjvm.so process `pid` maps, opened as it maps it (see
    /// [`rtlab_sys::procfs::open_mapped`]: under its own root, no symlink followed, the
    /// very file of its maps line, the process still the one read). None: it maps none.
    pub fn of_process(pid: u32) -> Result<Option<Library>, ProbeError> {
        let shown = || PathBuf::from(format!("/proc/{pid}/maps: libjvm.so"));
        let opened = match rtlab_sys::procfs::open_mapped(pid, "libjvm.so") {
            // Ended while it was read (a shell loop's short-lived tasks): no JVM there.
            Err(e) if rtlab_sys::procfs::is_gone(&e) => return Ok(None),
            other => other.map_err(|e| io(&shown(), e))?,
        };
        Ok(opened.map(|m| Library {
            root_owned: m.root_owned(),
            shown: PathBuf::from(&m.mapping.path),
            id: (m.mapping.dev, m.mapping.inode),
            file: std::sync::Arc::new(m.file),
        }))
    }

    /// The file at `path` (the libjvm.so of a JVM the user's own command will start),
    /// opened once: a regular file only, checked before it is opened.
    pub fn open(path: &Path) -> Result<Library, ProbeError> {
        use std::os::unix::fs::MetadataExt;
        let file = match rtlab_sys::fs::open_regular(path) {
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                return Err(not_elf(path, "not a regular file"))
            }
            other => other.map_err(|e| io(path, e))?,
        };
        let meta = file.metadata().map_err(|e| io(path, e))?;
        Ok(Library {
            shown: path.to_path_buf(),
            id: (meta.dev(), meta.ino()),
            root_owned: meta.uid() == 0 && meta.mode() & 0o022 == 0,
            file: std::sync::Arc::new(file),
        })
    }

    /// The path the kernel is given for a probe in it: this descriptor's, in rtlab's own
    /// `/proc/self/fd` (valid while this library, or a clone of it, is open).
    pub fn kernel_path(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// Its USDT probe sites of `provider`s (none when it has no `.note.stapsdt`).
    pub fn sites(&self, providers: &[&str]) -> Result<Vec<Site>, ProbeError> {
        Elf::of(&self.file, &self.shown)?.sites(providers)
    }

    /// The file offset of function `symbol` (its mangled name), from its symbol table
    /// (`.symtab`, else `.dynsym`): where a uprobe at its entry goes. None when the file has
    /// no such function (stripped, or another build).
    pub fn function(&self, symbol: &str) -> Result<Option<u64>, ProbeError> {
        Elf::of(&self.file, &self.shown)?.function(symbol)
    }
}

/// An ELF file being read: its section headers, their names, its loadable segments.
struct Elf<'a> {
    path: &'a Path,
    file: &'a std::fs::File,
    size: u64,
    sections: Vec<u8>,
    names: Vec<u8>,
    /// Its loadable segments: (address, size, file offset).
    loads: Vec<(u64, u64, u64)>,
}

const SECTION: usize = 64;

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

impl<'a> Elf<'a> {
    fn of(file: &'a std::fs::File, path: &'a Path) -> Result<Elf<'a>, ProbeError> {
        let meta = file.metadata().map_err(|e| io(path, e))?;
        if !meta.is_file() {
            return Err(not_elf(path, "not a regular file"));
        }
        let mut elf = Elf {
            path,
            file,
            size: meta.len(),
            sections: Vec::new(),
            names: Vec::new(),
            loads: Vec::new(),
        };
        if elf.size < 64 {
            return Err(not_elf(path, "not a 64-bit little-endian ELF file"));
        }
        let header = elf.read(0, 64)?;
        if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
            return Err(not_elf(path, "not a 64-bit little-endian ELF file"));
        }
        let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
        let (phoff, phentsize, phnum) = (
            u64_at(&header, 0x20),
            u16_at(&header, 0x36),
            u16_at(&header, 0x38),
        );
        let (shoff, shentsize, shnum, shstrndx) = (
            u64_at(&header, 0x28),
            u16_at(&header, 0x3a),
            u16_at(&header, 0x3c),
            u16_at(&header, 0x3e),
        );
        if shentsize != SECTION || phentsize != 56 || shstrndx >= shnum {
            return Err(not_elf(path, "unexpected ELF headers"));
        }
        elf.sections = elf.read(shoff, shentsize * shnum)?;
        let s = elf.section(shstrndx).to_vec();
        elf.names = elf.read(u64_at(&s, 24), u64_at(&s, 32) as usize)?;
        let ph = elf.read(phoff, phentsize * phnum)?;
        elf.loads = (0..phnum)
            .map(|i| &ph[i * phentsize..(i + 1) * phentsize])
            .filter(|p| u32_at(p, 0) == 1)
            .map(|p| (u64_at(p, 16), u64_at(p, 32), u64_at(p, 8)))
            .collect();
        Ok(elf)
    }

    /// `len` bytes at `at`. (A length is checked against the file's, and a bound, before
    /// anything that long is allocated: a sparse file can be as large as it says.)
    fn read(&self, at: u64, len: usize) -> Result<Vec<u8>, ProbeError> {
        if at.checked_add(len as u64).is_none_or(|end| end > self.size) {
            return Err(not_elf(
                self.path,
                "a header points past the end of the file",
            ));
        }
        if len > MAX_READ {
            return Err(not_elf(self.path, "a section larger than a libjvm.so's"));
        }
        let mut b = vec![0u8; len];
        self.file
            .read_exact_at(&mut b, at)
            .map_err(|e| io(self.path, e))?;
        Ok(b)
    }

    fn section(&self, i: usize) -> &[u8] {
        &self.sections[i * SECTION..(i + 1) * SECTION]
    }

    fn find(&self, wanted: &str) -> Option<&[u8]> {
        (0..self.sections.len() / SECTION)
            .map(|i| self.section(i))
            .find(|s| string_at(&self.names, u32_at(s, 0) as usize) == wanted.as_bytes())
    }

    /// A section's contents.
    fn contents(&self, s: &[u8]) -> Result<Vec<u8>, ProbeError> {
        self.read(u64_at(s, 24), u64_at(s, 32) as usize)
    }

    fn sites(&self, providers: &[&str]) -> Result<Vec<Site>, ProbeError> {
        let Some(notes) = self.find(".note.stapsdt") else {
            return Ok(Vec::new());
        };
        if u64_at(notes, 32) > MAX_NOTES as u64 {
            return Err(not_elf(self.path, "more probe notes than a libjvm.so's"));
        }
        // A prelinked file moved its text: its `.stapsdt.base` says by how much.
        let base_now = self.find(".stapsdt.base").map(|s| u64_at(s, 16));
        let data = self.contents(notes)?;
        Ok(sites_in_notes(&data, base_now, &self.loads, providers))
    }

    fn function(&self, symbol: &str) -> Result<Option<u64>, ProbeError> {
        for table in [".symtab", ".dynsym"] {
            let Some(s) = self.find(table) else {
                continue;
            };
            let link = u32_at(s, 40) as usize;
            if link >= self.sections.len() / SECTION {
                return Err(not_elf(self.path, "a symbol table without its strings"));
            }
            let (symbols, strings) = (self.contents(s)?, self.contents(self.section(link))?);
            // Elf64_Sym: name (4), info (1), other (1), section (2), value (8), size (8).
            let found = symbols.chunks_exact(24).find(|sym| {
                sym[4] & 0xf == 2 // STT_FUNC
                    && u64_at(sym, 8) != 0
                    && string_at(&strings, u32_at(sym, 0) as usize) == symbol.as_bytes()
            });
            if let Some(sym) = found {
                return Ok(file_offset(u64_at(sym, 8), &self.loads));
            }
        }
        Ok(None)
    }
}

fn io(path: &Path, error: std::io::Error) -> ProbeError {
    ProbeError::Io {
        path: path.to_path_buf(),
        error,
    }
}

fn not_elf(path: &Path, why: &'static str) -> ProbeError {
    ProbeError::NotElf {
        path: path.to_path_buf(),
        why,
    }
}

/// The NUL-terminated string at `at` in a string table (empty past its end).
fn string_at(table: &[u8], at: usize) -> &[u8] {
    let rest = &table[at.min(table.len())..];
    &rest[..rest.iter().position(|&c| c == 0).unwrap_or(rest.len())]
}

/// The file offset of address `addr`: through the loadable segment holding it, if any.
fn file_offset(addr: u64, loads: &[(u64, u64, u64)]) -> Option<u64> {
    let &(v, _, offset) = loads
        .iter()
        .find(|&&(v, size, _)| addr.checked_sub(v).is_some_and(|d| d < size))?;
    offset.checked_add(addr - v)
}

/// The probe sites of `providers` in `.note.stapsdt`'s `data` (the first [`MAX_SITES`]),
/// their addresses moved by the prelink base `base_now` (if any) and turned into file
/// offsets through the loadable segments `loads` (address, size, file offset); a note
/// outside them is left out.
fn sites_in_notes(
    data: &[u8],
    base_now: Option<u64>,
    loads: &[(u64, u64, u64)],
    providers: &[&str],
) -> Vec<Site> {
    let mut out = Vec::new();
    let mut at = 0;
    let align = |n: usize| n.div_ceil(4) * 4;
    while at + 12 <= data.len() && out.len() < MAX_SITES {
        let (namesz, descsz, kind) = (
            u32_at(data, at) as usize,
            u32_at(data, at + 4) as usize,
            u32_at(data, at + 8),
        );
        let name_at = at + 12;
        let desc_at = name_at + align(namesz);
        let next = desc_at + align(descsz);
        if next > data.len() {
            break;
        }
        if kind == 3 && &data[name_at..name_at + namesz.min(8)] == b"stapsdt\0" && descsz >= 24 {
            let desc = &data[desc_at..desc_at + descsz];
            let (mut pc, base, semaphore) = (u64_at(desc, 0), u64_at(desc, 8), u64_at(desc, 16));
            if let Some(now) = base_now {
                pc = pc.wrapping_add(now.wrapping_sub(base));
            }
            let mut strings = desc[24..].split(|&c| c == 0);
            let provider = String::from_utf8_lossy(strings.next().unwrap_or_default());
            let wanted = providers.contains(&provider.as_ref());
            if let (true, Some(at_file)) = (wanted, file_offset(pc, loads)) {
                let mut text = || String::from_utf8_lossy(strings.next().unwrap_or_default());
                let (name, args) = (text().into_owned(), text().into_owned());
                let provider = provider.into_owned();
                out.push(Site {
                    provider,
                    name,
                    offset: at_file,
                    semaphore,
                    args: args.split_whitespace().map(parse_arg).collect(),
                });
            }
        }
        at = next;
    }
    out
}

/// One argument's spec (`SIZE@OPERAND`, GNU assembler syntax).
fn parse_arg(spec: &str) -> Arg {
    let Some((size, operand)) = spec.split_once('@') else {
        return Arg::Unsupported;
    };
    let Ok(size) = size.parse::<i8>() else {
        return Arg::Unsupported;
    };
    if let Some(c) = operand.strip_prefix('$') {
        return c.parse().map_or(Arg::Unsupported, Arg::Constant);
    }
    match operand.strip_prefix('%').and_then(regs_offset) {
        Some(regs_offset) => Arg::Register { regs_offset, size },
        None => Arg::Unsupported,
    }
}

/// A register's offset in x86-64 `struct pt_regs`, by any of its names (`rax`, `eax`, `ax`,
/// `al`; `r8`, `r8d`, `r8w`, `r8b`).
pub(crate) fn regs_offset(name: &str) -> Option<i16> {
    const CLASSIC: [(&[&str], i16); 8] = [
        (&["rbp", "ebp", "bp", "bpl"], 32),
        (&["rbx", "ebx", "bx", "bl"], 40),
        (&["rax", "eax", "ax", "al"], 80),
        (&["rcx", "ecx", "cx", "cl"], 88),
        (&["rdx", "edx", "dx", "dl"], 96),
        (&["rsi", "esi", "si", "sil"], 104),
        (&["rdi", "edi", "di", "dil"], 112),
        (&["rsp", "esp", "sp", "spl"], 152),
    ];
    if let Some((_, o)) = CLASSIC.iter().find(|(names, _)| names.contains(&name)) {
        return Some(*o);
    }
    let n: u8 = name
        .strip_prefix('r')?
        .trim_end_matches(['d', 'w', 'b'])
        .parse()
        .ok()?;
    // r15 first in pt_regs: r15 0, r14 8, r13 16, r12 24, (bp, bx), r11 48, r10 56, r9 64, r8 72.
    match n {
        12..=15 => Some((15 - n as i16) * 8),
        8..=11 => Some(48 + (11 - n as i16) * 8),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_specs_name_their_registers_in_pt_regs() {
        assert_eq!(
            parse_arg("8@%r14"),
            Arg::Register {
                regs_offset: 8,
                size: 8
            }
        );
        assert_eq!(
            parse_arg("-4@%eax"),
            Arg::Register {
                regs_offset: 80,
                size: -4
            }
        );
        assert_eq!(
            parse_arg("1@%dil"),
            Arg::Register {
                regs_offset: 112,
                size: 1
            }
        );
        assert_eq!(
            parse_arg("8@%r8"),
            Arg::Register {
                regs_offset: 72,
                size: 8
            }
        );
        assert_eq!(
            parse_arg("4@%r11d"),
            Arg::Register {
                regs_offset: 48,
                size: 4
            }
        );
        assert_eq!(parse_arg("1@$1"), Arg::Constant(1));
        assert_eq!(parse_arg("8@-24(%rbp)"), Arg::Unsupported);
    }

    #[test]
    fn the_jdks_here_carry_hotspots_probes() {
        // Every libjvm.so installed: its safepoint and VM operation probes, at offsets inside
        // the file, as readelf -n lists them.
        let jvms: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/jvm")
            .into_iter()
            .flatten()
            .flatten()
            .map(|d| d.path().join("lib/server/libjvm.so"))
            .filter(|p| p.exists())
            .collect();
        if jvms.is_empty() {
            rtlab_sys::testing::say_skipped("no libjvm.so under /usr/lib/jvm");
            return;
        }
        for jvm in jvms {
            let lib = Library::open(&jvm).unwrap();
            let sites = lib.sites(&["hotspot", "hs_private"]).unwrap();
            let size = std::fs::metadata(&jvm).unwrap().len();
            for name in [
                "safepoint__begin",
                "safepoint__end",
                "vmops__begin",
                "vmops__end",
            ] {
                let s = sites
                    .iter()
                    .find(|s| s.name == name)
                    .unwrap_or_else(|| panic!("{name} in {}", jvm.display()));
                assert!(s.offset > 0 && s.offset < size, "{s:?}");
            }
            // Its clock, where nm (binutils) finds it: in these files its text segment's
            // addresses are its file offsets.
            let clock = lib.function(crate::event::CLOCK_FUNCTION).unwrap();
            let nm = std::process::Command::new("nm").arg(&jvm).output();
            match nm {
                Ok(out) if out.status.success() => {
                    let listed = String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .find(|l| l.ends_with(crate::event::CLOCK_FUNCTION))
                        .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok());
                    assert_eq!(clock, listed, "{}", jvm.display());
                    assert!(clock.is_some_and(|c| c > 0 && c < size));
                }
                _ => {
                    rtlab_sys::testing::say_skipped("the clock's offset against nm's (no nm here)")
                }
            }
            let vmops = sites.iter().find(|s| s.name == "vmops__begin").unwrap();
            assert_eq!(vmops.provider, "hotspot");
            assert!(
                matches!(vmops.args[0], Arg::Register { size: 8, .. }),
                "{vmops:?}"
            );
        }
    }

    #[test]
    fn the_kernel_is_given_the_file_read_not_whatever_its_path_names_since() {
        // The file's owner swaps its path for a symlink to another file (of root's) once
        // rtlab has read the notes: the probe still goes in the file whose notes were read.
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libjvm.so");
        std::fs::write(&lib, b"not yet an ELF file, but the one read").unwrap();
        let opened = Library::open(&lib).unwrap();
        let inode = std::fs::metadata(&lib).unwrap().ino();
        std::fs::rename(&lib, dir.path().join("old")).unwrap();
        std::os::unix::fs::symlink("/bin/sh", &lib).unwrap();
        let given = std::fs::metadata(opened.kernel_path()).unwrap();
        assert_eq!((given.dev(), given.ino()), opened.id);
        assert_eq!(given.ino(), inode);
        // A file of this test's user, writable by it alone: root's only when run as root.
        let is_root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
        assert_eq!(opened.root_owned, is_root);
    }

    #[test]
    fn a_file_of_64_mib_of_notes_is_refused_before_they_are_read() {
        // An ELF header, and three sections: none, the section names, and a note section
        // of 64 MiB (the file sparse: nothing that large is written, nor read).
        let names = b"\0.shstrtab\0.note.stapsdt\0";
        let (names_at, table_at) = (64u64, 128u64);
        let notes_len = 64u64 << 20;
        let notes_at = table_at + 3 * 64;
        let mut f = vec![0u8; notes_at as usize];
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        f[0x28..0x30].copy_from_slice(&table_at.to_le_bytes());
        f[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        f[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        f[names_at as usize..names_at as usize + names.len()].copy_from_slice(names);
        let section = |f: &mut Vec<u8>, i: usize, name: u32, at: u64, len: u64| {
            let s = table_at as usize + i * 64;
            f[s..s + 4].copy_from_slice(&name.to_le_bytes());
            f[s + 24..s + 32].copy_from_slice(&at.to_le_bytes());
            f[s + 32..s + 40].copy_from_slice(&len.to_le_bytes());
        };
        section(&mut f, 1, 1, names_at, names.len() as u64);
        section(&mut f, 2, 11, notes_at, notes_len);
        let dir = tempfile::tempdir().unwrap();
        let bomb = dir.path().join("libjvm.so");
        std::fs::write(&bomb, &f).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&bomb)
            .unwrap()
            .set_len(notes_at + notes_len)
            .unwrap();
        let e = Library::open(&bomb)
            .unwrap()
            .sites(&["hotspot"])
            .unwrap_err();
        assert!(
            e.to_string()
                .ends_with("more probe notes than a libjvm.so's"),
            "{e}"
        );
        assert!(
            e.is_the_files(),
            "remembered, not read again for another process"
        );
    }

    #[test]
    fn notes_of_other_providers_are_not_kept_and_past_a_bound_none_are() {
        let note = |provider: &str, name: &str| {
            let desc: Vec<u8> = [0u64, 0, 0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .chain(format!("{provider}\0{name}\0\0").into_bytes())
                .collect();
            let mut n = Vec::new();
            n.extend(8u32.to_le_bytes());
            n.extend((desc.len() as u32).to_le_bytes());
            n.extend(3u32.to_le_bytes());
            n.extend(b"stapsdt\0");
            n.extend(&desc);
            n.resize(n.len().div_ceil(4) * 4, 0);
            n
        };
        let loads = [(0, 1 << 20, 0)];
        let mut data = note("other", "x");
        data.extend(note("hotspot", "safepoint__begin"));
        let kept = sites_in_notes(&data, None, &loads, &["hotspot"]);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].name, "safepoint__begin");
        let many: Vec<u8> = (0..MAX_SITES + 10)
            .flat_map(|_| note("hotspot", "safepoint__begin"))
            .collect();
        assert_eq!(
            sites_in_notes(&many, None, &loads, &["hotspot"]).len(),
            MAX_SITES
        );
    }

    #[test]
    fn a_file_that_is_not_one_or_lies_in_its_headers_is_refused_without_reading_past_its_end() {
        let dir = std::env::temp_dir().join(format!("rtlab-usdt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let short = dir.join("short");
        std::fs::write(&short, b"\x7fELF").unwrap();
        let sites = |p: &Path| Library::open(p)?.sites(&["hotspot"]);
        let e = sites(&short).unwrap_err();
        assert!(matches!(e, ProbeError::NotElf { .. }), "{e}");
        assert!(
            e.to_string()
                .ends_with("not a 64-bit little-endian ELF file"),
            "{e}"
        );
        // A 64-bit header whose section table lies 2^60 bytes on (and 65535 entries long):
        // refused, nothing that large allocated.
        let mut h = vec![0u8; 64];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[0x28..0x30].copy_from_slice(&(1u64 << 60).to_le_bytes());
        h[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        h[0x3c..0x3e].copy_from_slice(&u16::MAX.to_le_bytes());
        let lying = dir.join("lying");
        std::fs::write(&lying, &h).unwrap();
        let e = sites(&lying).unwrap_err();
        assert!(e.to_string().contains("past the end of the file"), "{e}");
        // A FIFO in its place: refused, not waited on.
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let e = sites(&fifo).unwrap_err();
        assert!(e.to_string().ends_with("not a regular file"), "{e}");
        let e = sites(&dir.join("absent")).unwrap_err();
        assert!(matches!(e, ProbeError::Io { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
