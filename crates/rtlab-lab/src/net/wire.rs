//! The wire format of `rtlab net`: every message starts with a 40-byte header (little endian).
//!
//! | bytes  | field      | meaning                                                        |
//! |--------|------------|----------------------------------------------------------------|
//! | 0      | `kind`     | [`Kind`]                                                       |
//! | 1      | `flags`    | reserved, 0                                                    |
//! | 2..4   | `stream`   | stream index                                                   |
//! | 4..8   | `payload`  | useful bytes after the header                                  |
//! | 8..12  | `pad`      | padding bytes after the payload, discarded by the receiver     |
//! | 12..16 | magic      | `RTLN`: a peer that is not rtlab is refused                    |
//! | 16..24 | `seq`      | sequence number within the stream                              |
//! | 24..32 | `sched_ns` | when the sender scheduled the message (its CLOCK_MONOTONIC)    |
//! | 32..40 | `sent_ns`  | when it really started sending it                              |
//!
//! An acknowledgement echoes `stream`, `seq`, `sched_ns` and `sent_ns`, so the sender
//! computes the round trip on its own clock: machines need no synchronised clocks.

use crate::LabError;
use std::io::{Read, Write};

/// Header length: the smallest message.
pub const HEADER_LEN: usize = 40;
/// Largest payload or padding a peer accepts.
pub const MAX_BODY: usize = 64 << 20;
const MAGIC: [u8; 4] = *b"RTLN";
/// Largest hello or report (JSON; a report's two histograms take tens of KB).
pub const MAX_CONTROL: u32 = 4 << 20;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A stream message; the receiver acknowledges it as soon as its payload arrived.
    Data = 1,
    /// The acknowledgement of a `Data` message (header only).
    Ack = 2,
    /// A ping-pong message; the receiver sends the whole message back.
    Echo = 3,
    /// The first message of a connection; its payload is the JSON [`super::peer::Hello`].
    Hello = 4,
    /// End of a reverse stream: from the client, "stop sending"; from the peer, its
    /// measurements as JSON.
    Report = 5,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Data,
            2 => Kind::Ack,
            3 => Kind::Echo,
            4 => Kind::Hello,
            5 => Kind::Report,
            _ => return None,
        })
    }
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What it is.
    pub kind: Kind,
    /// Stream index.
    pub stream: u16,
    /// Useful bytes after the header.
    pub payload: u32,
    /// Padding after the payload.
    pub pad: u32,
    /// Sequence number.
    pub seq: u64,
    /// Scheduled send time (sender's clock).
    pub sched_ns: u64,
    /// Actual send time (sender's clock).
    pub sent_ns: u64,
}

impl Header {
    /// A header of `kind` with everything else zero.
    pub fn new(kind: Kind) -> Header {
        Header {
            kind,
            stream: 0,
            payload: 0,
            pad: 0,
            seq: 0,
            sched_ns: 0,
            sent_ns: 0,
        }
    }

    /// Writes the header into the first 40 bytes of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        out[0] = self.kind as u8;
        out[1] = 0;
        out[2..4].copy_from_slice(&self.stream.to_le_bytes());
        out[4..8].copy_from_slice(&self.payload.to_le_bytes());
        out[8..12].copy_from_slice(&self.pad.to_le_bytes());
        out[12..16].copy_from_slice(&MAGIC);
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.sched_ns.to_le_bytes());
        out[32..40].copy_from_slice(&self.sent_ns.to_le_bytes());
    }

    /// Reads a header, refusing anything that is not one (bad magic, kind, lengths).
    pub fn decode(bytes: &[u8]) -> Result<Header, LabError> {
        if bytes.len() < HEADER_LEN || bytes[12..16] != MAGIC {
            return Err(LabError::Net(
                "not an rtlab net message (is the peer `rtlab net serve`?)".into(),
            ));
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8"));
        let kind = Kind::from_u8(bytes[0])
            .ok_or_else(|| LabError::Net(format!("unknown kind {}", bytes[0])))?;
        let (payload, pad) = (u32_at(4), u32_at(8));
        if payload as usize > MAX_BODY || pad as usize > MAX_BODY {
            return Err(LabError::Net(format!(
                "message lengths {payload}+{pad} over the maximum"
            )));
        }
        Ok(Header {
            kind,
            stream: u16::from_le_bytes([bytes[2], bytes[3]]),
            payload,
            pad,
            seq: u64_at(16),
            sched_ns: u64_at(24),
            sent_ns: u64_at(32),
        })
    }

    /// Reads one header from a stream.
    pub fn read_from(r: &mut impl Read) -> std::io::Result<Header> {
        let mut buf = [0u8; HEADER_LEN];
        r.read_exact(&mut buf)?;
        Header::decode(&buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// Writes this header alone (an acknowledgement).
    pub fn write_to(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut buf = [0u8; HEADER_LEN];
        self.encode(&mut buf);
        w.write_all(&buf)
    }
}

/// Reads and drops `n` bytes.
pub fn skip(r: &mut impl Read, n: u64) -> std::io::Result<()> {
    let copied = std::io::copy(&mut r.take(n), &mut std::io::sink())?;
    if copied != n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Writes a control message (`Hello`, `Report`) whose payload is `message` as JSON (the
/// types of [`super::protocol`]).
pub fn write_control(
    w: &mut impl Write,
    kind: Kind,
    message: &impl serde::Serialize,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(message)?;
    let mut h = Header::new(kind);
    h.payload = body.len() as u32;
    let mut buf = vec![0u8; HEADER_LEN + body.len()];
    h.encode(&mut buf);
    buf[HEADER_LEN..].copy_from_slice(&body);
    w.write_all(&buf)
}

/// Reads the JSON payload of a control message whose header was read, as a `T` (one of the
/// types of [`super::protocol`], or a `serde_json::Value` to be checked by the caller).
pub fn read_control<T: serde::de::DeserializeOwned>(
    r: &mut impl Read,
    h: &Header,
) -> std::io::Result<T> {
    // Hellos and reports are small JSON: a peer's claim of more is refused, not allocated.
    if h.payload > MAX_CONTROL {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "a control message of {} bytes (at most {MAX_CONTROL})",
                h.payload
            ),
        ));
    }
    let mut body = vec![0u8; h.payload as usize];
    r.read_exact(&mut body)?;
    skip(r, h.pad as u64)?;
    serde_json::from_slice(&body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_garbage_is_refused() {
        let h = Header {
            kind: Kind::Data,
            stream: 3,
            payload: 1000,
            pad: 2896,
            seq: 42,
            sched_ns: 7,
            sent_ns: 9,
        };
        let mut buf = [0u8; HEADER_LEN];
        h.encode(&mut buf);
        assert_eq!(Header::decode(&buf).unwrap(), h);
        let mut bad = buf;
        bad[12] = b'X';
        assert!(Header::decode(&bad).is_err());
        let mut bad = buf;
        bad[0] = 99;
        assert!(Header::decode(&bad).is_err());
        let mut bad = buf;
        bad[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Header::decode(&bad).is_err());
    }
}
