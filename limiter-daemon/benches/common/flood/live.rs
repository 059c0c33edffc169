//! A second sender, for a flood faster than AF_PACKET's: the kernel's own XDP traffic generator
//! mode (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES`, what xdp-trafficgen uses), with a
//! four-instruction program `return bpf_redirect(<sender veth>, 0)`. Each frame leaves as an
//! `xdp_frame` through the sender veth's `ndo_xdp_xmit` into the receiver's ring, flushed in
//! bulk, the way a NIC hands a batch to its driver; this is also the case where the receiving
//! veth must be in NAPI mode (GRO or an XDP program), or the frames are dropped.
//!
//! One call sends `repeat` copies of one source's frame; calls cycle through the sources.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use limiter_tests::netns::Netns;

use super::frames::{ifindex, syns, Dest, SYN_LEN};
use super::sender::Sent;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
const BPF_FUNC_REDIRECT: i32 = 23;

#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
struct TestRun {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> libc::c_long {
    // SAFETY: `attr` is the attribute struct for `cmd`, of the size passed; pointers in it are
    // live for the call.
    unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as u32,
        )
    }
}

pub struct LiveSender {
    prog: OwnedFd,
    frames: Vec<[u8; SYN_LEN]>,
    next: usize,
    repeat: u32,
}

impl LiveSender {
    /// Loads the redirect program for `iface` in `ns` (its index is resolved there) and one SYN
    /// per source.
    pub fn new(ns: &Netns, iface: &str, sources: &[Ipv4Addr], to: &Dest, repeat: u32) -> Self {
        let frames = syns(sources, to);
        let iface = iface.to_string();
        let ifindex = ns.run(move || ifindex(&iface));
        assert!(ifindex > 0, "no sender interface");
        let mov_imm = |reg: u8, imm: i32| Insn {
            code: 0xb7, // BPF_ALU64 | BPF_MOV | BPF_K
            regs: reg,
            off: 0,
            imm,
        };
        let insns = [
            mov_imm(1, ifindex as i32),
            mov_imm(2, 0),
            Insn {
                code: 0x85, // BPF_JMP | BPF_CALL
                regs: 0,
                off: 0,
                imm: BPF_FUNC_REDIRECT,
            },
            Insn {
                code: 0x95, // BPF_JMP | BPF_EXIT
                regs: 0,
                off: 0,
                imm: 0,
            },
        ];
        let license = b"GPL\0";
        let mut log = vec![0u8; 4096];
        let mut name = [0u8; 16];
        name[..11].copy_from_slice(b"flood_redir");
        let mut attr = ProgLoad {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: 1,
            log_size: log.len() as u32,
            log_buf: log.as_mut_ptr() as u64,
            kern_version: 0,
            prog_flags: 0,
            prog_name: name,
            prog_ifindex: 0,
            expected_attach_type: 0,
        };
        let fd = bpf(BPF_PROG_LOAD, &mut attr);
        assert!(
            fd >= 0,
            "loading the redirect program: {} ({})",
            std::io::Error::last_os_error(),
            String::from_utf8_lossy(&log).trim_end_matches('\0')
        );
        LiveSender {
            // SAFETY: a fresh fd from BPF_PROG_LOAD that nobody else owns.
            prog: unsafe { OwnedFd::from_raw_fd(fd as i32) },
            frames,
            next: 0,
            repeat,
        }
    }

    /// One run: `repeat` copies of the next source's frame.
    fn run_once(&mut self) {
        let frame = &self.frames[self.next];
        self.next = (self.next + 1) % self.frames.len();
        let mut attr = TestRun {
            prog_fd: self.prog.as_raw_fd() as u32,
            retval: 0,
            data_size_in: SYN_LEN as u32,
            data_size_out: 0,
            data_in: frame.as_ptr() as u64,
            data_out: 0,
            repeat: self.repeat,
            duration: 0,
            ctx_size_in: 0,
            ctx_size_out: 0,
            ctx_in: 0,
            ctx_out: 0,
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            cpu: 0,
            batch_size: 0,
            _pad: 0,
        };
        let rc = bpf(BPF_PROG_TEST_RUN, &mut attr);
        assert!(
            rc == 0,
            "BPF_PROG_TEST_RUN (live frames): {}",
            std::io::Error::last_os_error()
        );
    }

    /// Sends `runs` runs (`runs × repeat` frames) from the calling thread (which must be in the
    /// sender's namespace).
    pub fn send_runs(&mut self, runs: usize) {
        for _ in 0..runs {
            self.run_once();
        }
    }

    /// Floods for `secs` from the calling thread (which must be in the sender's namespace).
    pub fn flood(&mut self, secs: Duration) -> Sent {
        let started = Instant::now();
        let mut frames = 0u64;
        while started.elapsed() < secs {
            self.run_once();
            frames += u64::from(self.repeat);
        }
        Sent {
            frames,
            secs: started.elapsed().as_secs_f64(),
        }
    }
}
