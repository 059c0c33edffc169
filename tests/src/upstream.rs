//! The smallest upstream: `200 ok` to every (bodyless) request, keep-alive, a thread per
//! connection, on a free loopback port, writing down each request's target (tests and benches
//! put the daemon's proxy in front of it).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    /// Starts it; it lives as long as the process.
    pub fn start() -> Upstream {
        let l = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = l.local_addr().expect("its address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { continue };
                let seen = Arc::clone(&s2);
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 8192];
                    loop {
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                            buf.drain(..end + 4);
                            let target = head.split(' ').nth(1).unwrap_or("").to_string();
                            seen.lock().unwrap().push(target);
                            let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if conn.write_all(ok).is_err() {
                                return;
                            }
                        }
                        match conn.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        Upstream { addr, seen }
    }

    /// The targets of the requests seen so far, in order.
    pub fn targets(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// An [`Upstream`] nobody asks about: its address.
pub fn ok() -> SocketAddr {
    Upstream::start().addr
}
