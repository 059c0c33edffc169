//! 64 tasks deciding for one identity at once never admit more than its budget, through the
//! awaited decision path the surfaces use. Part of the conformance suite (`LIMITER_TEST_STORE`:
//! run on the embedded store, a standalone Valkey and a Valkey Cluster).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::rig::*;
use limiter_daemon::engine::decider::Decided;
use limiter_daemon::engine::{Action, Reason, RequestView};
use limiter_daemon::identity::client_ip::Client;

#[test]
fn sixty_four_tasks_on_one_identity_never_admit_more_than_the_limit() {
    let r = Arc::new(rig(
        "[tiers.anon]\nburst = 60000\nhourly = 100\n[[routes]]\nprefix = \"/\"\n",
    ));
    let admitted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let (r, admitted, refused) =
                (Arc::clone(&r), Arc::clone(&admitted), Arc::clone(&refused));
            tasks.push(tokio::spawn(async move {
                let headers = http::HeaderMap::new();
                for _ in 0..10 {
                    let req = RequestView {
                        client: Client::Addr(ip("198.51.100.64")),
                        method: &http::Method::GET,
                        path: "/",
                        headers: &headers,
                    };
                    let d = match r.engine.decide_async(&req) {
                        Decided::Ready(d) => d,
                        Decided::Pending(f) => f.await,
                    };
                    match d.action() {
                        Action::Allow => admitted.fetch_add(1, Ordering::SeqCst),
                        Action::Reject => {
                            assert_eq!(d.reason(), Some(Reason::Hourly), "{d:?}");
                            refused.fetch_add(1, Ordering::SeqCst)
                        }
                        Action::Delay => panic!("no delay route: {d:?}"),
                    };
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(admitted.load(Ordering::SeqCst), 100, "exactly the budget");
    assert_eq!(refused.load(Ordering::SeqCst), 540);
}
