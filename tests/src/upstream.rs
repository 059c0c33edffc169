//! The smallest upstream: `200 ok` to every request, keep-alive, a thread per connection, on a
//! free loopback port (tests and benches put the daemon's proxy in front of it).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

/// Starts it; it lives as long as the process.
pub fn ok() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = l.local_addr().expect("its address");
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        if c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .is_err()
                        {
                            return;
                        }
                    }
                    match c.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}
