//! What `/readyz` answers: ready unless the store is degraded (counting locally), the kernel
//! dataplane is required but not attached, or the engine is not built yet. Each failing check
//! is named, so the JSON body says why.

use serde::Serialize;

use super::sources::Sources;
use crate::config::kernel::KernelMode;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// Why not, one sentence per failing check (empty when ready).
    pub reasons: Vec<String>,
}

impl Readiness {
    pub fn check(sources: &Sources) -> Self {
        let mut reasons = Vec::new();
        match sources.engine.get() {
            None => reasons.push("engine not started yet".to_string()),
            Some(engine) => {
                if engine.store().degraded() {
                    reasons.push(
                        "store degraded: the store does not answer, counting locally".to_string(),
                    );
                }
            }
        }
        if let Some(k) = sources.kernel.get() {
            if k.mode == KernelMode::Required && k.attached.is_none() {
                reasons.push(
                    "kernel dataplane required (kernel.mode = \"required\") but not attached"
                        .to_string(),
                );
            }
        }
        Readiness {
            ready: reasons.is_empty(),
            reasons,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::KernelSource;

    #[test]
    fn required_kernel_not_attached_and_no_engine_are_both_named() {
        let sources = Sources::default();
        sources
            .kernel
            .set(KernelSource {
                mode: KernelMode::Required,
                attached: None,
            })
            .unwrap();
        let r = Readiness::check(&sources);
        assert!(!r.ready);
        assert_eq!(r.reasons.len(), 2, "{:?}", r.reasons);
        assert!(r.reasons[0].contains("engine not started"));
        assert!(r.reasons[1].contains("kernel dataplane required"));
    }

    #[test]
    fn auto_kernel_not_attached_is_still_ready_for_the_kernel_check() {
        let sources = Sources::default();
        sources
            .kernel
            .set(KernelSource {
                mode: KernelMode::Auto,
                attached: None,
            })
            .unwrap();
        let r = Readiness::check(&sources);
        assert_eq!(r.reasons, vec!["engine not started yet".to_string()]);
    }
}
