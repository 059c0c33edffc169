//! A decision as the request path receives it ([`Decided`]): made in place, or a future
//! waiting on a remote store. Every surface awaits the second instead of blocking on it.

use std::future::Future;
use std::pin::Pin;

use crate::model::Decision;

/// A decision as the request path receives it: made in place, or waiting on a remote store.
pub enum Decided<'a> {
    Ready(Decision),
    /// Awaiting a remote store's answer (boxed: the rare, slow case keeps the common one
    /// small in every connection's future).
    Pending(Pin<Box<dyn Future<Output = Decision> + Send + 'a>>),
}
