//! The one entry point the proxy forwards through: a bodyless idempotent request takes the
//! direct path, anything else hyper's client; the answer's body is [`UpstreamBody`] either way.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::proxy::upstream::client::{HyperBody, Upstream};
use crate::proxy::upstream::direct::{eligible, DirectBody};
use crate::proxy::upstream::error::UpstreamError;

impl Upstream {
    /// Sends `req` (its URI is reduced to the path and query; a missing `Host` gets the
    /// upstream's; other headers are sent as given) and returns the response head with its body
    /// unread.
    pub async fn send(
        self: &Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        if eligible(&req) {
            let (parts, _empty) = req.into_parts();
            let resp = self.send_direct(parts).await?;
            return Ok(resp.map(UpstreamBody::Direct));
        }
        let resp = self.send_with_body(req).await?;
        Ok(resp.map(UpstreamBody::Hyper))
    }
}

/// The upstream's response body, streamed through, from whichever path fetched it.
pub enum UpstreamBody {
    Direct(DirectBody),
    Hyper(HyperBody),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            UpstreamBody::Direct(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            UpstreamBody::Hyper(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Direct(b) => b.is_end_stream(),
            UpstreamBody::Hyper(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Direct(b) => b.size_hint(),
            UpstreamBody::Hyper(b) => b.size_hint(),
        }
    }
}
