//! Disturbance loads: known, bounded interference to run while an experiment measures.
//!
//! Every load runs on its own named threads (`rtlab-load-<kind>`, `rtlab-hog`), stops when its
//! [`RunningLoads`] is stopped or dropped (so also on panic and on early return), and stops by
//! itself at a hard deadline even if nobody stops it. Temporary files are removed on stop.
#![deny(unsafe_code)]

mod spec;
mod workers;

pub use spec::{LoadKind, LoadSpec, SpecError, LOAD_HELP};
pub use workers::{start, LoadError, LoadReport, RunningLoads, StartError};
