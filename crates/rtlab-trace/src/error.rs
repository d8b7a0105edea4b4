//! Why tracing could not start or went wrong.

use std::path::PathBuf;

/// Why the tracer could not start, or what failed while it ran.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// Not root: the event sources are root-only here.
    #[error("needs root ({0} root-only here)")]
    NotRoot(&'static str),
    /// tracefs is not mounted and could not be mounted.
    #[error("tracefs is not mounted and {0}")]
    NoTracefs(String),
    /// The kernel or this build lacks what the source needs (an event, a BTF field, the
    /// memory ordering the recorder relies on ...).
    #[error("{0}")]
    Unsupported(String),
    /// The kernel's BTF, which says where the programs read a task's fields, could not be
    /// read.
    #[error(transparent)]
    Btf(#[from] crate::btf::BtfError),
    /// A tracefs or output file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A system call failed (creating maps, loading or attaching programs ...).
    #[error(transparent)]
    Sys(#[from] rtlab_sys::SysError),
    /// A program the recorder needs was refused by the kernel.
    #[error("{0}")]
    Program(String),
    /// The eBPF recorder failed where only it was asked for.
    #[error("eBPF recorder: {0}")]
    Recorder(Box<TraceError>),
    /// Neither event source could start: why the eBPF recorder failed, then tracefs.
    #[error("eBPF: {bpf}; tracefs: {tracefs}")]
    NoSource {
        /// Why the eBPF recorder could not start.
        bpf: String,
        /// Why tracefs could not be used either.
        tracefs: Box<TraceError>,
    },
    /// The reader thread could not start.
    #[error("cannot start the reader: {0}")]
    ReaderStart(std::io::Error),
    /// The reader thread panicked.
    #[error("the explainer's reader panicked")]
    ReaderPanicked,
    /// The tracefs pipe could not be read.
    #[error("reading the tracing instance's ring buffers: {0}")]
    Pipe(std::io::Error),
    /// An outlier's window could not be written, or its directory made.
    #[error("--trace-out {path}: {error}")]
    TraceOut {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong (said in the line, not as a cause: the line is whole).
        error: std::io::Error,
    },
}

impl TraceError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> TraceError {
        TraceError::Io {
            path: path.into(),
            source,
        }
    }
}

/// What the event source could not record on this kernel, and why: consumers decide by the
/// variant (a watch words a missing lock series apart), the text is for people.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// A tracepoint or tracefs event, by name.
    Event(String),
    /// The kernel stacks of explained delays, and why.
    Stacks(String),
    /// PI lock waits (a watch's `lock` kind), and why.
    LockWaits(String),
    /// A watched process's children from their start, and why.
    Children(String),
    /// The watched threads' wait calls, and why.
    WaitCalls(String),
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Event(name) => f.write_str(name),
            Missing::Stacks(why) => write!(f, "kernel stacks ({why})"),
            Missing::LockWaits(why) => write!(f, "PI lock waits ({why})"),
            Missing::Children(why) => write!(f, "children from their start ({why})"),
            Missing::WaitCalls(why) => write!(f, "wait calls ({why})"),
        }
    }
}
