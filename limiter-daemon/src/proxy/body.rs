//! The proxy's response body: either the upstream's streamed body, passed through frame by
//! frame, or a small body the daemon wrote itself (429/502/503/504 problem documents).
//!
//! An enum rather than a boxed trait object: no allocation per response on the hot path.

use crate::proxy::upstream::send::UpstreamBody;
use bytes::Bytes;
use http_body_util::{Either, Full};

pub type ProxyBody = Either<UpstreamBody, Full<Bytes>>;

/// A body the daemon wrote.
pub fn full(bytes: Bytes) -> ProxyBody {
    Either::Right(Full::new(bytes))
}

/// The upstream's body, streamed through.
pub fn streamed(body: UpstreamBody) -> ProxyBody {
    Either::Left(body)
}
