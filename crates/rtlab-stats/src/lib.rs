//! Statistics and result documents for rtlab: the [`Nanos`] newtype, a latency histogram on
//! HdrHistogram with coordinated-omission accounting, `.hgrm` export, and the serde types of
//! the result document (`schema/result.schema.json`). No unsafe code and no I/O beyond
//! writers handed in by the caller.
#![deny(unsafe_code)]

pub mod area;
pub mod cause;
pub mod details;
mod histogram;
mod interval;
mod nanos;
pub mod result;
mod units;

pub use histogram::{
    decode_work, HistogramError, LatencyHistogram, LiveHistogram, HIGHEST_TRACKABLE_NS,
};
pub use interval::Interval;
pub use nanos::Nanos;
pub use units::{parse_duration, parse_size, ParseError};
