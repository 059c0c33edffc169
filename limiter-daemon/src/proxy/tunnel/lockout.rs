//! Closes the tunnels of callers locked out while their tunnels are open (by an operator or a
//! strike): the kernel drops a locked address's new packets anyway, and a half-dead tunnel
//! helps no one. Once a second, while any tunnel is open, each tunnel's caller is asked about
//! through [`Decider::standing`] (which counts nothing), off the async threads since a remote
//! store may be asked.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine::decider::{Decider, RequestView};
use crate::proxy::tunnel::registry::Tunnels;

/// How often open tunnels' callers are checked.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Checks until `stop` is cancelled.
pub async fn sweep(tunnels: Arc<Tunnels>, decider: Arc<dyn Decider>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        if tunnels.open_now() == 0 {
            continue;
        }
        let callers = tunnels.callers();
        let decider = Arc::clone(&decider);
        let checked = tokio::task::spawn_blocking(move || {
            for (caller, kill) in callers {
                let view = RequestView {
                    client: caller.client,
                    method: &caller.method,
                    path: &caller.path,
                    headers: &caller.headers,
                };
                if decider
                    .standing(&view)
                    .is_some_and(|s| s.locked_secs.is_some())
                {
                    tracing::info!(peer = %caller.peer, "caller locked out: closing its tunnel");
                    kill.cancel();
                }
            }
        })
        .await;
        if checked.is_err() {
            tracing::error!("tunnel lockout check panicked");
        }
    }
}
