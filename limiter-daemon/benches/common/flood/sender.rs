//! The flood's sender: raw SYN frames written to the sender's veth through an AF_PACKET socket,
//! `BATCH` frames per `sendmmsg`, cycling through one prebuilt frame per source. There is no
//! pktgen module or xdp-trafficgen on the build machine's kernel, so this is the generator.
//!
//! `PACKET_QDISC_BYPASS` hands each frame straight to the veth's `ndo_start_xmit`: no qdisc, no
//! lock, none of the sender's CPU spent on queueing, so one sending core offers more than the
//! receiver's core can take. What the veth cannot hand over (its peer's ring full) it drops and
//! counts, at no cost to the receiver.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use limiter_tests::netns::Netns;

use super::frames::{ifindex, syns, Dest, SYN_LEN};

/// Frames per `sendmmsg` call.
pub const BATCH: usize = 64;

pub struct Sender {
    fd: OwnedFd,
    ifindex: i32,
    frames: Vec<[u8; SYN_LEN]>,
    next: usize,
}

/// What a flood offered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sent {
    pub frames: u64,
    pub secs: f64,
}

impl Sender {
    /// A socket on `iface` in `ns` and one SYN per source (source ports and sequence numbers
    /// vary, so each frame is a new connection attempt).
    pub fn new(ns: &Netns, iface: &str, sources: &[Ipv4Addr], to: &Dest) -> Self {
        let frames = syns(sources, to);
        let iface = iface.to_string();
        let (fd, ifindex) = ns.run(move || {
            let ifindex = ifindex(&iface) as i32;
            assert!(ifindex > 0, "no interface {iface} in the sender namespace");
            // Protocol 0: this socket receives nothing, so the answers cost the sender nothing.
            // SAFETY: plain socket(2); the fd is owned below.
            let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
            assert!(
                raw >= 0,
                "AF_PACKET socket: {}",
                std::io::Error::last_os_error()
            );
            // SAFETY: `raw` is a fresh fd nobody else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1);
            setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
            (fd, ifindex)
        });
        Sender {
            fd,
            ifindex,
            frames,
            next: 0,
        }
    }

    /// Sends up to `BATCH` frames (fewer when `max` is smaller), returning how many the socket
    /// took.
    pub fn send_batch(&mut self, max: usize) -> usize {
        let n = max.min(BATCH);
        // SAFETY: sockaddr_ll is plain data; zero is a valid start.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_IP as u16).to_be();
        addr.sll_ifindex = self.ifindex;
        let mut iov: [libc::iovec; BATCH] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        // SAFETY: mmsghdr is plain data; zero is a valid start.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            let frame = &self.frames[(self.next + i) % self.frames.len()];
            iov[i].iov_base = frame.as_ptr() as *mut libc::c_void;
            iov[i].iov_len = SYN_LEN;
            msgs[i].msg_hdr.msg_name = (&raw mut addr).cast();
            msgs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            msgs[i].msg_hdr.msg_iov = &raw mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..n]` point at live frames, iovecs and `addr` for the whole call.
        let rc = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), n as u32, 0) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            // A full send buffer or a busy device: the frames were not taken; try again.
            assert!(
                matches!(
                    err.raw_os_error(),
                    Some(libc::ENOBUFS | libc::EAGAIN | libc::EINTR)
                ),
                "sendmmsg on the sender's veth: {err}"
            );
            return 0;
        }
        let sent = rc as usize;
        self.next = (self.next + sent) % self.frames.len();
        sent
    }

    /// Sends exactly `n` frames.
    pub fn send(&mut self, n: usize) {
        let mut left = n;
        while left > 0 {
            left -= self.send_batch(left);
        }
    }

    /// Floods for `secs` from the calling thread.
    pub fn flood(&mut self, secs: Duration) -> Sent {
        let started = Instant::now();
        let mut frames = 0u64;
        while started.elapsed() < secs {
            frames += self.send_batch(BATCH) as u64;
        }
        Sent {
            frames,
            secs: started.elapsed().as_secs_f64(),
        }
    }
}

fn setsockopt(fd: &OwnedFd, level: i32, name: i32, value: i32) {
    // SAFETY: `value` is an int, the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<i32>() as u32,
        )
    };
    assert_eq!(
        rc,
        0,
        "setsockopt({level}, {name}): {}",
        std::io::Error::last_os_error()
    );
}
