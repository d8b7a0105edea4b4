//! What the two ends of `rtlab net` say to each other, typed: the JSON payloads of the
//! control messages (a client's [`Hello`], the peer's [`Welcome`], a reverse stream's
//! [`Stop`] and [`StreamReport`]). The framing (headers, data messages) is in
//! [`super::wire`].
//!
//! Everything read from the other end is the other end's word: decoding checks it
//! ([`Hello::decode`], [`Plan::checked`], [`SocketOptions::bounded`]), and what a peer
//! grants is brought within its owner's limits afterwards (`Hello::within`).

use super::wire::{self, HEADER_LEN};
use crate::LabError;
use rtlab_sys::sched::Policy;
use serde::{Deserialize, Serialize};

/// A scheduling policy by name (`other`, `fifo`, `rr`, ...); a name this build does not
/// know reads as SCHED_OTHER, the safe choice for a peer.
mod policy_name {
    use rtlab_sys::sched::Policy;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Policy, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(p.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Policy, D::Error> {
        let name = Option::<String>::deserialize(d)?;
        Ok(name.and_then(|n| n.parse().ok()).unwrap_or(Policy::Other))
    }
}

fn other() -> Policy {
    Policy::Other
}

/// Socket options applied on both ends of a connection (also a series' `options` config).
/// Missing fields take their defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SocketOptions {
    /// TCP_NODELAY (default on).
    pub nodelay: bool,
    /// TCP_QUICKACK, re-armed after every receive.
    pub quickack: bool,
    /// SO_BUSY_POLL microseconds (0: off).
    pub busy_poll_us: u32,
    /// SO_PRIORITY.
    pub priority: Option<u32>,
    /// IP_TOS.
    pub tos: Option<u8>,
    /// SO_SNDBUF.
    pub sndbuf: Option<usize>,
    /// SO_RCVBUF.
    pub rcvbuf: Option<usize>,
    /// TCP_THIN_LINEAR_TIMEOUTS.
    #[serde(rename = "thin_linear_timeouts")]
    pub thin: bool,
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            nodelay: true,
            quickack: false,
            busy_poll_us: 0,
            priority: None,
            tos: None,
            sndbuf: None,
            rcvbuf: None,
            thin: false,
        }
    }
}

impl SocketOptions {
    /// Within what the kernel takes at all (a peer's word: 1 s of busy polling, priority
    /// 15, 1 GiB buffers at most).
    pub fn bounded(self) -> SocketOptions {
        SocketOptions {
            busy_poll_us: self.busy_poll_us.min(1_000_000),
            priority: self.priority.map(|p| p.min(15)),
            sndbuf: self.sndbuf.map(|b| b.min(1 << 30)),
            rcvbuf: self.rcvbuf.map(|b| b.min(1 << 30)),
            ..self
        }
    }

    /// As the JSON of a series' config.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// What one stream sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Stream index (in the wire header).
    pub stream: u16,
    /// Message size in bytes (header included; at least 40).
    pub size: usize,
    /// Period.
    pub period_ns: u64,
    /// Pad each message so at least this many full segments are sent (0: off; TCP only).
    pub pad_segments: u32,
    /// Messages scheduled in the first `warmup_ns` are sent but not recorded.
    pub warmup_ns: u64,
    /// A round trip over this counts as a deadline miss.
    pub deadline_ns: u64,
    /// Scheduling of the sending and acknowledging threads.
    #[serde(with = "policy_name", default = "other")]
    pub policy: Policy,
    /// Their priority.
    pub prio: u32,
}

impl Plan {
    /// A client's plan, refused when its size or period is out of range, its padding and
    /// priority bounded, so a hostile client cannot make the peer misbehave.
    pub fn checked(self) -> Result<Plan, LabError> {
        if !(HEADER_LEN..=wire::MAX_BODY).contains(&self.size) || self.period_ns < 10_000 {
            return Err(LabError::Net(format!(
                "plan out of range: {} bytes every {} ns",
                self.size, self.period_ns
            )));
        }
        Ok(Plan {
            pad_segments: self.pad_segments.min(64),
            prio: self.prio.min(99),
            ..self
        })
    }
}

/// What a client wants from a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Acknowledge each message of a periodic stream.
    Stream,
    /// Echo each message.
    Pingpong,
    /// Swallow everything (background traffic).
    Bulk,
    /// Run a periodic stream towards the client, which acknowledges it.
    Reverse,
    /// Open a UDP session: the peer answers datagrams from the client's address and
    /// `udp_port` while this connection stays open (and no others: an rtlab peer is never
    /// a reflector for datagrams with a forged source).
    Udp,
}

/// A client's first message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// What it wants.
    pub role: Role,
    /// Socket options the peer applies on its side too.
    #[serde(default)]
    pub options: SocketOptions,
    /// Scheduling of the peer's thread for this connection.
    #[serde(with = "policy_name", default = "other")]
    pub policy: Policy,
    /// Its priority.
    #[serde(default)]
    pub prio: u32,
    /// For `reverse`: what the peer sends.
    #[serde(default)]
    pub plan: Option<Plan>,
    /// Pad every acknowledgement to this many segments too (0: off): a lost ack needs fast
    /// retransmit as much as a lost message.
    #[serde(default)]
    pub pad_segments: u32,
    /// The secret of a peer rtlab started for itself (see `PeerLimits::token`).
    #[serde(default)]
    pub token: Option<String>,
    /// For `udp`: the port the client's datagrams come from.
    #[serde(default)]
    pub udp_port: Option<u16>,
}

impl Hello {
    /// A hello as read from a client: checked and bounded (its priority, padding, plan and
    /// options), an unknown role or a malformed field refused.
    pub fn decode(value: serde_json::Value) -> Result<Hello, LabError> {
        let h: Hello = serde_json::from_value(value)
            .map_err(|e| LabError::Net(format!("a bad hello: {e}")))?;
        Ok(Hello {
            options: h.options.bounded(),
            prio: h.prio.min(99),
            pad_segments: h.pad_segments.min(64),
            plan: h.plan.map(Plan::checked).transpose()?,
            ..h
        })
    }
}

/// The peer's answer to a hello: it is an rtlab peer, of this version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Welcome {
    /// rtlab's version.
    pub rtlab: String,
}

impl Welcome {
    /// This build's.
    pub fn this() -> Welcome {
        Welcome {
            rtlab: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// The client's request to end a reverse stream (an empty report).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stop {}

/// A stream's counters (also a series' `counters` config).
pub use rtlab_stats::details::StreamCounters as Counters;

/// What a reverse stream measured, as the peer reports it: the histograms in the result's
/// encoding (base64 of a compressed HdrHistogram; empty: no sample).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StreamReport {
    /// Round trips.
    #[serde(default)]
    pub rtt: String,
    /// Send lateness.
    #[serde(default)]
    pub lateness: String,
    /// The counters.
    #[serde(default)]
    pub counters: Counters,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_hello_round_trips_and_a_peers_word_is_checked() {
        let hello = Hello {
            role: Role::Reverse,
            options: SocketOptions {
                quickack: true,
                tos: Some(0x10),
                ..SocketOptions::default()
            },
            policy: Policy::Fifo,
            prio: 80,
            plan: Some(Plan {
                stream: 1,
                size: 256,
                period_ns: 1_000_000,
                pad_segments: 0,
                warmup_ns: 0,
                deadline_ns: 5_000_000,
                policy: Policy::Fifo,
                prio: 80,
            }),
            pad_segments: 2,
            token: Some("t".into()),
            udp_port: None,
        };
        let back = Hello::decode(serde_json::to_value(&hello).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(&hello).unwrap()
        );
        // The keys the older hand-written protocol used are the same.
        let v = serde_json::to_value(&hello).unwrap();
        assert_eq!(v["options"]["thin_linear_timeouts"], false);
        assert_eq!(v["policy"], "fifo");
        assert_eq!(v["role"], "reverse");

        // Out of range: bounded; missing options: defaults; an unknown policy: SCHED_OTHER.
        let h = Hello::decode(json!({
            "role": "stream", "prio": 500, "pad_segments": 1000, "policy": "deadline?",
            "options": {"busy_poll_us": 9_000_000, "priority": 99, "sndbuf": 1u64 << 40},
        }))
        .unwrap();
        assert_eq!((h.prio, h.pad_segments, h.policy), (99, 64, Policy::Other));
        assert_eq!(h.options.busy_poll_us, 1_000_000);
        assert_eq!(h.options.priority, Some(15));
        assert_eq!(h.options.sndbuf, Some(1 << 30));
        assert!(h.options.nodelay, "a missing option takes its default");

        // Refused: no role, an unknown one, a wrong type, a plan out of range.
        for bad in [
            json!({}),
            json!({"role": "exfiltrate"}),
            json!({"role": "stream", "prio": "high"}),
            json!({"role": "reverse", "plan": {"stream": 0, "size": 8, "period_ns": 1_000_000,
                "pad_segments": 0, "warmup_ns": 0, "deadline_ns": 0, "prio": 0}}),
            json!({"role": "reverse", "plan": {"stream": 0, "size": 100, "period_ns": 10,
                "pad_segments": 0, "warmup_ns": 0, "deadline_ns": 0, "prio": 0}}),
        ] {
            assert!(Hello::decode(bad.clone()).is_err(), "{bad}");
        }
    }
}
