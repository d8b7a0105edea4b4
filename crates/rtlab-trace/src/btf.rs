//! Just enough of the kernel's BTF (`/sys/kernel/btf/vmlinux`) to find where a structure's
//! members are: the BPF programs read a few fields of `struct task_struct` at the offsets this
//! kernel was built with (what libbpf's CO-RE does, without a compiler).

/// Why the kernel's BTF could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BtfError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// Not BTF, or of the other byte order.
    #[error("not little-endian BTF")]
    NotLittleEndian,
    /// A header or a type that runs past the data.
    #[error("malformed BTF")]
    Malformed,
    /// A type kind newer than this reader.
    #[error("unknown BTF kind {0}")]
    UnknownKind(u8),
}

/// A parsed BTF blob.
#[derive(Debug)]
pub struct Btf {
    types: Vec<Type>,
    strings: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Type {
    name_off: u32,
    kind: u8,
    kind_flag: bool,
    /// `size` for structs/unions, `type` for pointers, typedefs, modifiers.
    size_or_type: u32,
    /// Struct/union members: (name_off, type, bit offset), or func-proto params (name, type, 0).
    members: Vec<(u32, u32, u32)>,
}

const KIND_STRUCT: u8 = 4;
const KIND_UNION: u8 = 5;
const KIND_TYPEDEF: u8 = 8;
const KIND_FUNC: u8 = 12;
const KIND_FUNC_PROTO: u8 = 13;

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

impl Btf {
    /// Reads the running kernel's BTF.
    pub fn vmlinux() -> Result<Btf, BtfError> {
        let path = "/sys/kernel/btf/vmlinux";
        let data = std::fs::read(path).map_err(|source| BtfError::Read { path, source })?;
        Btf::parse(&data)
    }

    /// Parses a BTF blob (little-endian, as on every architecture rtlab runs on).
    pub fn parse(data: &[u8]) -> Result<Btf, BtfError> {
        let bad = || BtfError::Malformed;
        if data.len() < 24 || data[0..2] != [0x9f, 0xeb] {
            return Err(BtfError::NotLittleEndian);
        }
        let hdr_len = u32_at(data, 4).ok_or_else(bad)? as usize;
        let type_off = u32_at(data, 8).ok_or_else(bad)? as usize;
        let type_len = u32_at(data, 12).ok_or_else(bad)? as usize;
        let str_off = u32_at(data, 16).ok_or_else(bad)? as usize;
        let str_len = u32_at(data, 20).ok_or_else(bad)? as usize;
        let types_bytes = data
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .ok_or_else(bad)?;
        let strings = data
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .ok_or_else(bad)?
            .to_vec();
        // Type 0 is `void`.
        let mut types = vec![Type {
            name_off: 0,
            kind: 0,
            kind_flag: false,
            size_or_type: 0,
            members: Vec::new(),
        }];
        let mut at = 0;
        while at + 12 <= types_bytes.len() {
            let name_off = u32_at(types_bytes, at).ok_or_else(bad)?;
            let info = u32_at(types_bytes, at + 4).ok_or_else(bad)?;
            let size_or_type = u32_at(types_bytes, at + 8).ok_or_else(bad)?;
            at += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = ((info >> 24) & 0x1f) as u8;
            let mut members = Vec::new();
            let extra = match kind {
                1 | 14 | 17 => 4,     // int, var, decl_tag
                3 => 12,              // array
                4 | 5 => 12 * vlen,   // struct, union
                6 => 8 * vlen,        // enum
                13 => 8 * vlen,       // func_proto
                15 | 19 => 12 * vlen, // datasec, enum64
                2 | 7..=12 | 16 | 18 => 0,
                k => return Err(BtfError::UnknownKind(k)),
            };
            let body = types_bytes.get(at..at + extra).ok_or_else(bad)?;
            if kind == KIND_STRUCT || kind == KIND_UNION {
                for m in body.chunks_exact(12) {
                    members.push((
                        u32_at(m, 0).ok_or_else(bad)?,
                        u32_at(m, 4).ok_or_else(bad)?,
                        u32_at(m, 8).ok_or_else(bad)?,
                    ));
                }
            } else if kind == KIND_FUNC_PROTO {
                for m in body.chunks_exact(8) {
                    members.push((
                        u32_at(m, 0).ok_or_else(bad)?,
                        u32_at(m, 4).ok_or_else(bad)?,
                        0,
                    ));
                }
            }
            at += extra;
            types.push(Type {
                name_off,
                kind,
                kind_flag: info >> 31 != 0,
                size_or_type,
                members,
            });
        }
        Ok(Btf { types, strings })
    }

    fn name(&self, off: u32) -> &[u8] {
        let s = self.strings.get(off as usize..).unwrap_or(&[]);
        &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
    }

    /// The named struct (the largest, if several share the name).
    fn find_struct(&self, name: &str) -> Option<&Type> {
        self.types
            .iter()
            .filter(|t| t.kind == KIND_STRUCT && self.name(t.name_off) == name.as_bytes())
            .max_by_key(|t| t.size_or_type)
    }

    /// Follows typedefs and modifiers to a struct or union.
    fn resolve(&self, mut id: u32) -> Option<&Type> {
        for _ in 0..16 {
            let t = self.types.get(id as usize)?;
            match t.kind {
                KIND_STRUCT | KIND_UNION => return Some(t),
                8..=11 | 18 => id = t.size_or_type,
                _ => return None,
            }
        }
        None
    }

    /// Byte offset of `path` (`"pid"`, `"thread_info.cpu"`) in `struct name`, looking into
    /// anonymous members too.
    pub fn offset_of(&self, name: &str, path: &str) -> Option<u32> {
        let mut ty = self.find_struct(name)?;
        let mut total = 0;
        let parts: Vec<&str> = path.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let (bits, member_type) = self.member(ty, part)?;
            total += bits / 8;
            if i + 1 < parts.len() {
                ty = self.resolve(member_type)?;
            }
        }
        Some(total)
    }

    /// (bit offset, type) of a member, searching anonymous structs/unions.
    fn member(&self, ty: &Type, name: &str) -> Option<(u32, u32)> {
        for &(name_off, member_type, off) in &ty.members {
            let bits = if ty.kind_flag { off & 0xff_ffff } else { off };
            if name_off == 0 {
                if let Some(inner) = self.resolve(member_type) {
                    if let Some((b, t)) = self.member(inner, name) {
                        return Some((bits + b, t));
                    }
                }
            } else if self.name(name_off) == name.as_bytes() {
                return Some((bits, member_type));
            }
        }
        None
    }

    /// The type id of the typedef `name`.
    pub fn typedef_id(&self, name: &str) -> Option<u32> {
        self.id_of(KIND_TYPEDEF, name)
    }

    /// The type id of `struct name` (the one [`Btf::offset_of`] reads).
    pub fn struct_id(&self, name: &str) -> Option<u32> {
        let found = self.find_struct(name)?;
        self.types
            .iter()
            .position(|t| std::ptr::eq(t, found))
            .map(|i| i as u32)
    }

    /// The type id of the function `name` (a kfunc is called by this id).
    pub fn func_id(&self, name: &str) -> Option<u32> {
        self.id_of(KIND_FUNC, name)
    }

    /// Number of parameters of the kernel function `name` (the arguments a function probe's
    /// context holds before the return value).
    pub fn func_params(&self, name: &str) -> Option<usize> {
        let f = self.types.get(self.func_id(name)? as usize)?;
        let proto = self.types.get(f.size_or_type as usize)?;
        (proto.kind == KIND_FUNC_PROTO).then_some(proto.members.len())
    }

    fn id_of(&self, kind: u8, name: &str) -> Option<u32> {
        self.types
            .iter()
            .position(|t| t.kind == kind && self.name(t.name_off) == name.as_bytes())
            .map(|i| i as u32)
    }

    /// Number of parameters of the function type behind a typedef of a pointer to it, like
    /// `btf_trace_sched_switch` (whose first parameter is the BPF context).
    pub fn typedef_fn_params(&self, typedef: &str) -> Option<usize> {
        let t = self
            .types
            .iter()
            .find(|t| t.kind == KIND_TYPEDEF && self.name(t.name_off) == typedef.as_bytes())?;
        let ptr = self.types.get(t.size_or_type as usize)?;
        let proto = self.types.get(ptr.size_or_type as usize)?;
        (proto.kind == KIND_FUNC_PROTO).then_some(proto.members.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built blob: struct outer { int a; union { int pid; }; struct in b; } with
    /// struct in { int x; int cpu; }.
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0outer\0a\0pid\0b\0in\0x\0cpu\0".to_vec();
        let s = |name: &str| -> u32 {
            let needle = format!("\0{name}\0");
            strings
                .windows(needle.len())
                .position(|w| w == needle.as_bytes())
                .unwrap() as u32
                + 1
        };
        let mut types = Vec::new();
        let mut push = |words: &[u32]| {
            for w in words {
                types.extend_from_slice(&w.to_le_bytes());
            }
        };
        // 1: int (4 bytes)
        push(&[s("int"), 1 << 24, 4, 32]);
        // 2: union { int pid; }
        push(&[0, (5 << 24) | 1, 4, s("pid"), 1, 0]);
        // 3: struct in { int x; int cpu; }
        push(&[s("in"), (4 << 24) | 2, 8, s("x"), 1, 0, s("cpu"), 1, 32]);
        // 4: struct outer { int a @0; union @32; struct in b @64 }
        push(&[
            s("outer"),
            (4 << 24) | 3,
            16,
            s("a"),
            1,
            0,
            0,
            2,
            32,
            s("b"),
            3,
            64,
        ]);
        let mut out = Vec::new();
        out.extend_from_slice(&[0x9f, 0xeb, 1, 0]);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(&strings);
        out
    }

    #[test]
    fn finds_direct_anonymous_and_nested_members() {
        let btf = Btf::parse(&blob()).unwrap();
        assert_eq!(btf.offset_of("outer", "a"), Some(0));
        assert_eq!(btf.offset_of("outer", "pid"), Some(4));
        assert_eq!(btf.offset_of("outer", "b.cpu"), Some(12));
        assert_eq!(btf.offset_of("outer", "nope"), None);
        assert_eq!(btf.offset_of("missing", "a"), None);
        let id = btf.struct_id("outer").expect("struct outer") as usize;
        assert_eq!(btf.name(btf.types[id].name_off), b"outer");
        assert_eq!(
            btf.struct_id("in").map(|i| btf.types[i as usize].kind),
            Some(KIND_STRUCT)
        );
        assert_eq!(btf.func_id("outer"), None, "a struct is not a function");
    }

    #[test]
    fn rejects_garbage() {
        assert!(Btf::parse(b"not btf at all, not at all").is_err());
        let mut b = blob();
        b.truncate(40);
        assert!(Btf::parse(&b).is_err());
    }

    #[test]
    fn reads_this_kernels_task_struct_when_present() {
        let Ok(btf) = Btf::vmlinux() else {
            rtlab_sys::testing::say_skipped("no /sys/kernel/btf/vmlinux");
            return;
        };
        let pid = btf
            .offset_of("task_struct", "pid")
            .expect("task_struct.pid");
        let tgid = btf
            .offset_of("task_struct", "tgid")
            .expect("task_struct.tgid");
        assert_eq!(tgid, pid + 4, "pid and tgid are adjacent pid_t");
        let comm = btf.offset_of("task_struct", "comm").expect("comm");
        assert!(comm > pid);
        // What the recorder reads to name the task a sleep timer wakes.
        assert!(btf.struct_id("hrtimer_sleeper").is_some());
        assert!(btf.offset_of("hrtimer_sleeper", "task").expect("task") > 0);
        assert!(btf.offset_of("hrtimer", "function").is_some());
    }
}
