//! The engine's side of the fetched proofs ([`crate::fetch::proof_refresh`] fetches them): what
//! is in force, and putting new data in force by swapping the runtime whole, as a reload does.

use std::sync::Arc;

use super::base::{Engine, Runtime};
use crate::config::Config;
use crate::fetch::proof_refresh::Holder;
use crate::fetch::proof_sources::{ProofSources, SourceStatus};
use crate::identity::IdentityResolver;

impl Engine {
    /// Every fetched proof source: URL, what it proves, its data in force and its fetches.
    pub fn proof_sources(&self) -> Vec<SourceStatus> {
        self.proofs.status()
    }
}

impl Holder for Engine {
    fn config(&self) -> Arc<Config> {
        Engine::config(self)
    }

    fn proofs(&self) -> &ProofSources {
        &self.proofs
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The runtime's config with [`ProofSources::overlay`], swapped whole.
    fn apply_proofs(&self) {
        self.replace_runtime(|old| {
            let mut cfg = (*old.cfg).clone();
            self.proofs.overlay(&mut cfg);
            let cfg = Arc::new(cfg);
            let resolver = Arc::new(IdentityResolver::with_crawler_dns(
                &cfg,
                Some(Arc::clone(&self.crawler_dns)),
            ));
            Runtime {
                cfg,
                resolver,
                lists: Arc::clone(&old.lists),
            }
        });
    }
}
