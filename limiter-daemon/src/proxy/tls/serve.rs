//! One TLS connection on a proxy listener: the handshake within the header-read timeout
//! (counted, a failure logged at debug), then hyper's server for the rest of its life with
//! `X-Forwarded-Proto: https` toward the upstream. The own HTTP/1.1 loop serves plain TCP
//! only; over TLS every request takes hyper's path (same decisions and answers).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::proxy::front::{hand_over, Front};
use crate::proxy::tls::certs::TlsCerts;

/// Serves `stream` from `peer` over TLS.
pub(crate) async fn serve(
    front: Arc<Front>,
    acceptor: TlsAcceptor,
    certs: Arc<TlsCerts>,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let shaken = tokio::time::timeout(front.header_read_timeout, acceptor.accept(stream)).await;
    let tls = match shaken {
        Ok(Ok(tls)) => {
            certs.counted(true);
            tls
        }
        Ok(Err(err)) => {
            certs.counted(false);
            tracing::debug!(%peer, error = %err, "TLS handshake failed");
            return;
        }
        Err(_) => {
            certs.counted(false);
            tracing::debug!(%peer, "TLS handshake not done within the header read timeout");
            return;
        }
    };
    Box::pin(hand_over(&front, tls, Bytes::new(), peer.ip(), None, true)).await;
}
