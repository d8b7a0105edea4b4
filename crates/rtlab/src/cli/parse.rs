//! Value parsers: each turns one argument into its value or into the one line that says why not.
//!
//! They return `Result<T, String>`, clap's `value_parser` idiom: clap prints the string as the
//! argument's error. The libraries' typed errors are turned into their line here, the last step.

use rtlab_load::LoadSpec;
use rtlab_stats::area::{SurveyStage, UnknownName};
use rtlab_stats::{parse_duration, Nanos};
use rtlab_sys::affinity::{usable_cpus, CpuList};
use rtlab_sys::sched::Policy;

/// An enum whose values have names on the command line.
pub(super) trait ByName: Copy + Send + Sync + 'static {
    /// What a value is, for the error line ("implementation", "mechanism" ...).
    const WHAT: &'static str;
    /// Every value, in the order help lists them.
    fn every() -> Vec<Self>;
    /// A value's name.
    fn name_of(self) -> &'static str;
}

/// The value of `T` named `text`, or the line that names the choices.
pub(super) fn by_name<T: ByName>(text: &str) -> Result<T, String> {
    T::every()
        .into_iter()
        .find(|v| v.name_of() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = T::every().into_iter().map(T::name_of).collect();
            format!(
                "unknown {} '{text}' (expected one of {})",
                T::WHAT,
                names.join(", ")
            )
        })
}

macro_rules! by_name {
    ($($ty:ty, $what:literal, $every:expr;)*) => {$(
        impl ByName for $ty {
            const WHAT: &'static str = $what;
            fn every() -> Vec<Self> {
                $every.into_iter().collect()
            }
            fn name_of(self) -> &'static str {
                self.name()
            }
        }
    )*};
}

by_name! {
    rtlab_lab::explain::Backend, "event source", {
        use rtlab_lab::explain::Backend;
        [Backend::Auto, Backend::Bpf, Backend::Tracefs]
    };
    rtlab_lab::lock::Impl, "implementation", rtlab_lab::lock::Impl::ALL;
    rtlab_lab::invert::Variant, "variant", rtlab_lab::invert::Variant::ALL;
    rtlab_lab::mmap::Waiter, "waiter", rtlab_lab::mmap::Waiter::ALL;
    rtlab_sys::sleep::Mechanism, "mechanism", rtlab_sys::sleep::Mechanism::ALL;
    rtlab_lab::ipc::Mechanism, "mechanism", rtlab_lab::ipc::Mechanism::every();
}

pub(super) fn parse_size_arg(text: &str) -> Result<u64, String> {
    rtlab_stats::parse_size(text).map_err(|e| e.to_string())
}

/// A size that must be above 0 (a buffer, a limit).
pub(super) fn positive_size_arg(text: &str) -> Result<u64, String> {
    match parse_size_arg(text)? {
        0 => Err("must be above 0".into()),
        n => Ok(n),
    }
}

pub(super) fn parse_pid(text: &str) -> Result<i32, String> {
    match text.parse::<i64>() {
        Ok(p) if (1..=i32::MAX as i64).contains(&p) => Ok(p as i32),
        _ => Err(format!("'{text}' is not a process or thread id")),
    }
}

pub(super) fn parse_peer(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if !text.contains(':') {
        return Err(format!("'{text}': expected ADDR:PORT, e.g. 10.0.0.2:7471"));
    }
    text.to_socket_addrs()
        .map_err(|e| format!("'{text}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{text}': no address"))
}

pub(super) fn parse_pct(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("'{text}': a percentage from 0 to 100")),
    }
}

pub(super) fn parse_regression_pct(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p >= 0.0 && p.is_finite() => Ok(p),
        _ => Err(format!(
            "'{text}': a percentage, 0 or more (10 means 10 % worse)"
        )),
    }
}

pub(super) fn parse_tos(text: &str) -> Result<u8, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("'{text}': a byte, 0-255 or 0x00-0xff"))
}

pub(super) fn parse_stream(text: &str) -> Result<rtlab_lab::net::StreamSpec, String> {
    text.parse()
        .map_err(|e: rtlab_lab::net::ValueError| e.to_string())
}

pub(super) fn duration_arg(text: &str) -> Result<Nanos, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

pub(super) fn positive_duration(text: &str) -> Result<Nanos, String> {
    match duration_arg(text)? {
        Nanos(0) => Err("must be above 0".into()),
        d => Ok(d),
    }
}

/// A duration, or `forever` ([`FOREVER`]: until Ctrl-C or SIGTERM; only some commands take it).
pub(super) fn duration_or_forever(text: &str) -> Result<Nanos, String> {
    if text == "forever" {
        return Ok(FOREVER);
    }
    positive_duration(text)
}

/// `--duration forever`.
pub const FOREVER: Nanos = Nanos(u64::MAX);

pub(super) fn parse_load(text: &str) -> Result<LoadSpec, String> {
    text.parse()
        .map_err(|e: rtlab_load::SpecError| e.to_string())
}

pub(super) fn parse_cpus(text: &str) -> Result<CpuList, String> {
    let list = CpuList::parse(text).map_err(|e| e.to_string())?;
    match list.check_within(&usable_cpus()) {
        Ok(()) => Ok(list),
        Err(e) => Err(e.to_string()),
    }
}

pub(super) fn parse_prio(text: &str) -> Result<u32, String> {
    match text.parse::<i64>() {
        Ok(p) if (0..=99).contains(&p) => Ok(p as u32),
        Ok(p) => Err(format!(
            "{p} is outside 1-99 (SCHED_FIFO/RR priorities; 0 with --policy other)"
        )),
        Err(_) => Err(format!("'{text}' is not a number")),
    }
}

pub(super) fn parse_policy(text: &str) -> Result<Policy, String> {
    text.parse()
        .map_err(|e: rtlab_sys::sched::UnknownPolicy| e.to_string())
}

pub(super) fn parse_threads(text: &str) -> Result<usize, String> {
    match text.parse::<i64>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n as usize),
        _ => Err(format!("'{text}' is not a thread count from 1 to 1024")),
    }
}

/// A check id that `rtlab tune` can apply.
pub(super) fn parse_tunable(text: &str) -> Result<String, String> {
    if rtlab_lab::tune::TUNABLE.contains(&text) {
        Ok(text.to_string())
    } else {
        Err(format!(
            "'{text}' is not a fix tune applies (expected one of {})",
            rtlab_lab::tune::TUNABLE.join(", ")
        ))
    }
}

/// `AREA=DUR` of `rtlab survey --fail-area`: a stage of the survey (its series' first part).
pub(super) fn parse_area_bound(text: &str) -> Result<(SurveyStage, Nanos), String> {
    let (area, bound) = text
        .split_once('=')
        .ok_or_else(|| format!("'{text}': expected AREA=DUR, e.g. ipc=200us"))?;
    let stage = area.parse().map_err(|e: UnknownName| e.to_string())?;
    Ok((stage, positive_duration(bound)?))
}
