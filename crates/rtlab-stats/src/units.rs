//! Parsing of durations (`500ms`) and sizes (`100MiB`) as written on the command line.

use crate::Nanos;

/// Why a duration or size could not be parsed; the text is meant for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

fn split_number(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    text.split_at(end)
}

fn parse_scaled(
    text: &str,
    what: &str,
    units: &[(&str, u64)],
    hint: &str,
) -> Result<u64, ParseError> {
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(ParseError(format!(
            "{what} must not be negative (got '{text}')"
        )));
    }
    let (number, unit) = split_number(trimmed);
    if number.is_empty() {
        return Err(ParseError(format!("'{text}' is not a {what} ({hint})")));
    }
    // A bare zero needs no unit: zero of any unit.
    if unit.trim().is_empty() && number.parse::<f64>().is_ok_and(|v| v == 0.0) {
        return Ok(0);
    }
    let scale = units
        .iter()
        .find(|(u, _)| u.eq_ignore_ascii_case(unit.trim()))
        .map(|(_, s)| *s)
        .ok_or_else(|| {
            if unit.is_empty() {
                ParseError(format!("'{text}' has no unit ({hint})"))
            } else {
                ParseError(format!("unknown unit '{unit}' in '{text}' ({hint})"))
            }
        })?;
    let value = if number.contains('.') {
        let v: f64 = number
            .parse()
            .map_err(|_| ParseError(format!("'{text}' is not a {what} ({hint})")))?;
        let scaled = v * scale as f64;
        if !scaled.is_finite() || scaled >= u64::MAX as f64 {
            return Err(ParseError(format!("{what} '{text}' is too large")));
        }
        scaled.round() as u64
    } else {
        let v: u64 = number
            .parse()
            .map_err(|_| ParseError(format!("{what} '{text}' is too large")))?;
        v.checked_mul(scale)
            .ok_or_else(|| ParseError(format!("{what} '{text}' is too large")))?
    };
    Ok(value)
}

/// Parses `500ms`, `10s`, `2m`, `1.5us`, `100ns`, `1h`, `2d`, and sums of them written
/// together, largest first as people write them: `1m30s`, `1h30m`, `1d12h`. A unit is
/// required; negatives are errors.
pub fn parse_duration(text: &str) -> Result<Nanos, ParseError> {
    const UNITS: &[(&str, u64)] = &[
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("min", 60_000_000_000),
        ("h", 3_600_000_000_000),
        ("d", 86_400_000_000_000),
    ];
    const HINT: &str = "use e.g. 500ms, 10s, 2m, 1m30s; units ns, us, ms, s, m, h, d";
    // Split before each number that follows a unit: `1m30s` -> `1m`, `30s`.
    let mut parts = Vec::new();
    let mut start = 0;
    let mut prev_unit = false;
    for (i, c) in text.char_indices() {
        let numeric = c.is_ascii_digit() || c == '.';
        if numeric && prev_unit {
            parts.push(&text[start..i]);
            start = i;
        }
        prev_unit = c.is_alphabetic();
    }
    parts.push(&text[start..]);
    let mut total: u64 = 0;
    for part in parts {
        let ns = parse_scaled(part, "duration", UNITS, HINT)?;
        total = total
            .checked_add(ns)
            .ok_or_else(|| ParseError(format!("duration '{text}' is too large")))?;
    }
    Ok(Nanos(total))
}

/// Parses a byte size: `4096`, `64B`, `1KiB`, `100MiB`, `1GiB` (also `K`, `M`, `G` as binary
/// multiples and `KB`, `MB`, `GB` as decimal ones). A bare number is bytes.
pub fn parse_size(text: &str) -> Result<u64, ParseError> {
    const UNITS: &[(&str, u64)] = &[
        ("", 1),
        ("b", 1),
        ("k", 1 << 10),
        ("kib", 1 << 10),
        ("kb", 1_000),
        ("m", 1 << 20),
        ("mib", 1 << 20),
        ("mb", 1_000_000),
        ("g", 1 << 30),
        ("gib", 1 << 30),
        ("gb", 1_000_000_000),
    ];
    parse_scaled(text, "size", UNITS, "use e.g. 64, 1KiB, 100MiB, 1GiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Nanos(500_000_000)));
        assert_eq!(parse_duration("10s"), Ok(Nanos(10_000_000_000)));
        assert_eq!(parse_duration("2m"), Ok(Nanos(120_000_000_000)));
        assert_eq!(parse_duration("1.5us"), Ok(Nanos(1_500)));
        assert_eq!(parse_duration("100ns"), Ok(Nanos(100)));
        assert_eq!(parse_duration("1h"), Ok(Nanos(3_600_000_000_000)));
        assert_eq!(parse_duration("0s"), Ok(Nanos(0)));
        assert_eq!(parse_duration("2d"), Ok(Nanos(2 * 86_400_000_000_000)));
        assert_eq!(parse_duration("1m30s"), Ok(Nanos(90_000_000_000)));
        assert_eq!(parse_duration("1h30m"), Ok(Nanos(5_400_000_000_000)));
        assert_eq!(parse_duration("1s500ms"), Ok(Nanos(1_500_000_000)));
        assert!(parse_duration("1m30")
            .unwrap_err()
            .to_string()
            .contains("no unit"));
        assert!(parse_duration("1m-30s").is_err());
    }

    #[test]
    fn bad_durations_say_why() {
        assert!(parse_duration("-5s")
            .unwrap_err()
            .to_string()
            .contains("negative"));
        assert!(parse_duration("5")
            .unwrap_err()
            .to_string()
            .contains("no unit"));
        assert!(parse_duration("5parsecs")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("99999999999999999999s")
            .unwrap_err()
            .to_string()
            .contains("large"));
        assert!(parse_duration("1.2.3s").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64"), Ok(64));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("100MiB"), Ok(100 << 20));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert!(parse_size("-1").is_err());
        assert!(parse_size("12 parsecs").is_err());
    }
}
