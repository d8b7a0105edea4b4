//! Socket options and namespace entry for `rtlab net`: thin wrappers over `setsockopt`,
//! `getsockopt(TCP_INFO)`, `setns` and `prctl(PR_SET_PDEATHSIG)`.

use crate::error::SysError;
use std::os::fd::{AsFd, AsRawFd};

fn set_int(fd: impl AsFd, level: i32, name: i32, value: i32, what: &str) -> Result<(), SysError> {
    // SAFETY: a valid descriptor, a pointer to a live int and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(SysError::from_io(
            format!("setsockopt({what}, {value})"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn get_int(fd: impl AsFd, level: i32, name: i32, what: &str) -> Result<i32, SysError> {
    let mut value: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: a valid descriptor, a pointer to a live int and its size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            (&mut value as *mut i32).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(SysError::from_io(
            format!("getsockopt({what})"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(value)
}

/// `TCP_QUICKACK`: acknowledge at once instead of delaying. The kernel clears it again after
/// some receives, so latency-minded receivers set it after every read.
pub fn set_quickack(fd: impl AsFd, on: bool) -> Result<(), SysError> {
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_QUICKACK,
        on as i32,
        "TCP_QUICKACK",
    )
}

/// `TCP_NODELAY`: send small segments at once (no Nagle).
pub fn set_nodelay(fd: impl AsFd, on: bool) -> Result<(), SysError> {
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NODELAY,
        on as i32,
        "TCP_NODELAY",
    )
}

/// `TCP_THIN_LINEAR_TIMEOUTS`: for thin streams, retransmission timeouts stay linear (no
/// exponential backoff) for the first retries.
pub fn set_thin_linear_timeouts(fd: impl AsFd, on: bool) -> Result<(), SysError> {
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_THIN_LINEAR_TIMEOUTS,
        on as i32,
        "TCP_THIN_LINEAR_TIMEOUTS",
    )
}

/// `SO_BUSY_POLL`: microseconds to busy-poll the device queue on blocking reads.
pub fn set_busy_poll_us(fd: impl AsFd, us: u32) -> Result<(), SysError> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_BUSY_POLL,
        us as i32,
        "SO_BUSY_POLL",
    )
}

/// `SO_PRIORITY`: the queueing priority of this socket's packets (0-6 without CAP_NET_ADMIN).
pub fn set_priority(fd: impl AsFd, prio: u32) -> Result<(), SysError> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_PRIORITY,
        prio as i32,
        "SO_PRIORITY",
    )
}

/// `IP_TOS`: the type-of-service byte (DSCP and ECN) of IPv4 packets.
pub fn set_tos(fd: impl AsFd, tos: u8) -> Result<(), SysError> {
    set_int(fd, libc::IPPROTO_IP, libc::IP_TOS, tos as i32, "IP_TOS")
}

/// `SO_SNDBUF` (the kernel doubles the value for its bookkeeping and caps it at wmem_max).
pub fn set_sndbuf(fd: impl AsFd, bytes: usize) -> Result<(), SysError> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_SNDBUF,
        bytes.min(i32::MAX as usize) as i32,
        "SO_SNDBUF",
    )
}

/// `SO_RCVBUF` (doubled by the kernel, capped at rmem_max).
pub fn set_rcvbuf(fd: impl AsFd, bytes: usize) -> Result<(), SysError> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        bytes.min(i32::MAX as usize) as i32,
        "SO_RCVBUF",
    )
}

/// The effective `SO_SNDBUF` and `SO_RCVBUF`.
pub fn buffer_sizes(fd: impl AsFd + Copy) -> Result<(usize, usize), SysError> {
    Ok((
        get_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, "SO_SNDBUF")? as usize,
        get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, "SO_RCVBUF")? as usize,
    ))
}

/// `TCP_MAXSEG`: the connection's maximum segment size.
pub fn max_segment(fd: impl AsFd) -> Result<usize, SysError> {
    Ok(get_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, "TCP_MAXSEG")? as usize)
}

/// The counters of `TCP_INFO` rtlab reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Smoothed RTT, microseconds.
    pub rtt_us: u32,
    /// Current retransmission timeout, microseconds.
    pub rto_us: u32,
}

/// `getsockopt(TCP_INFO)`.
pub fn tcp_counters(fd: impl AsFd) -> Result<TcpCounters, SysError> {
    // SAFETY: tcp_info is plain data; zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a valid descriptor, a pointer to a live tcp_info and its size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(SysError::from_io(
            "getsockopt(TCP_INFO)",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(TcpCounters {
        total_retrans: info.tcpi_total_retrans,
        rtt_us: info.tcpi_rtt,
        rto_us: info.tcpi_rto,
    })
}

/// Moves the calling thread into the network namespace at `path` (`/run/netns/NAME`).
/// C: `setns(open(path), CLONE_NEWNET)`. Needs CAP_SYS_ADMIN.
pub fn enter_netns(path: &std::path::Path) -> Result<(), SysError> {
    let file = std::fs::File::open(path)
        .map_err(|e| SysError::from_io(format!("open({})", path.display()), e))?;
    // SAFETY: a valid namespace descriptor.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(SysError::from_io(
            format!("setns({}, CLONE_NEWNET)", path.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Asks the kernel to send `signal` to this process when its parent dies (survives `exec`).
/// C: `prctl(PR_SET_PDEATHSIG, signal)`. Async-signal-safe: usable between fork and exec.
pub fn set_parent_death_signal(signal: i32) -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `struct ethtool_value` of `<linux/ethtool.h>`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `ETHTOOL_SGRO`: set generic receive offload.
const ETHTOOL_SGRO: u32 = 0x0000_002c;
/// `ETHTOOL_GGRO`: get it.
const ETHTOOL_GGRO: u32 = 0x0000_002b;

fn ethtool_value(dev: &str, cmd: u32, data: u32) -> Result<u32, SysError> {
    let what = || format!("SIOCETHTOOL({dev})");
    if dev.is_empty() || dev.len() >= libc::IFNAMSIZ {
        return Err(SysError::Invalid {
            what: format!("interface name '{dev}'"),
        });
    }
    let sock = std::net::UdpSocket::bind("127.0.0.1:0")
        .or_else(|_| std::net::UdpSocket::bind("[::1]:0"))
        .map_err(|e| SysError::from_io(what(), e))?;
    let mut value = EthtoolValue { cmd, data };
    // SAFETY: zeroed ifreq is valid; the name fits (checked) and stays NUL-terminated.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, b) in req.ifr_name.iter_mut().zip(dev.bytes()) {
        *slot = b as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL reads the ifreq and the ethtool_value it points to, both live for
    // the call; the socket is a valid descriptor.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
    if rc < 0 {
        return Err(SysError::from_io(what(), std::io::Error::last_os_error()));
    }
    Ok(value.data)
}

/// `ETHTOOL_STSO`: set TCP segmentation offload (all its variants).
const ETHTOOL_STSO: u32 = 0x0000_001f;

/// Turns TCP segmentation offload on or off (`ethtool -K DEV tso on|off`). A veth end that
/// sends TSO-sized TCP skbs makes its peer skip NAPI for them (they go through the backlog).
pub fn set_tso(dev: &str, on: bool) -> Result<(), SysError> {
    ethtool_value(dev, ETHTOOL_STSO, u32::from(on)).map(|_| ())
}

/// Whether generic receive offload is on for `dev` (`ethtool -k DEV | grep generic-receive`).
pub fn gro_enabled(dev: &str) -> Result<bool, SysError> {
    ethtool_value(dev, ETHTOOL_GGRO, 0).map(|v| v != 0)
}

/// Turns generic receive offload on or off (`ethtool -K DEV gro on|off`); on a veth device
/// GRO is what gives it NAPI (and so threaded NAPI).
pub fn set_gro(dev: &str, on: bool) -> Result<(), SysError> {
    ethtool_value(dev, ETHTOOL_SGRO, u32::from(on)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_apply_to_a_loopback_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        set_nodelay(&client, true).unwrap();
        set_quickack(&client, true).unwrap();
        set_thin_linear_timeouts(&client, true).unwrap();
        set_sndbuf(&client, 1 << 20).unwrap();
        set_rcvbuf(&client, 1 << 20).unwrap();
        let (snd, rcv) = buffer_sizes(&client).unwrap();
        assert!(snd >= 1 << 20 || snd >= 200_000, "sndbuf {snd}");
        assert!(rcv > 0);
        assert!(max_segment(&client).unwrap() > 500);
        assert_eq!(tcp_counters(&client).unwrap().total_retrans, 0);
        assert!(set_tos(&client, 0x10).is_ok());
    }
}
