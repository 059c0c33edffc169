//! A connection the pool keeps, of either client path: a plain TCP stream for the direct path
//! (with what it has read past the last exchange) or hyper's handle.

use bytes::BytesMut;
use hyper::client::conn::http1::SendRequest;
use tokio::net::TcpStream;

use crate::proxy::request_body::RequestBody;
use crate::proxy::upstream::pool::{Kind, Pooled, Slot};

/// Read-buffer growth per read.
pub(crate) const READ_SIZE: usize = 16 * 1024;

/// A pooled upstream connection and whatever it has read past the last exchange; its slot
/// under the connection cap is given back when it closes.
pub(crate) struct DirectConn {
    pub(crate) stream: TcpStream,
    pub(crate) buf: BytesMut,
    _slot: Slot,
}

impl DirectConn {
    pub(crate) fn new(stream: TcpStream, slot: Slot) -> Self {
        DirectConn {
            stream,
            buf: BytesMut::with_capacity(READ_SIZE),
            _slot: slot,
        }
    }
}

/// A connection kept by the pool, of either client path.
pub(crate) enum Conn {
    Direct(DirectConn),
    Hyper(SendRequest<RequestBody>),
}

impl Pooled for Conn {
    fn kind(&self) -> Kind {
        match self {
            Conn::Direct(_) => Kind::Direct,
            Conn::Hyper(_) => Kind::Hyper,
        }
    }

    fn reusable(&self) -> bool {
        match self {
            Conn::Direct(_) => true,
            Conn::Hyper(sender) => sender.is_ready(),
        }
    }
}
