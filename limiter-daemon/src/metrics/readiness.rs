//! What `/readyz` answers: ready unless the store is degraded (counting locally), the fleet's
//! lockout stream is not followed (other hosts' lockouts would not reach this one), the kernel
//! dataplane is required but not attached, or the engine is not built yet. Each failing check
//! is named, so the JSON body says why.
//!
//! State files found corrupt at start and set aside are listed too (`stateFilesSetAside`), but
//! do not make the daemon unready: it serves without their contents, and a start-time fact
//! that never clears would otherwise take the host out of its load balancer for good.

use serde::Serialize;

use super::sources::Sources;
use crate::config::kernel::KernelMode;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    pub ready: bool,
    /// Why not, one sentence per failing check (empty when ready).
    pub reasons: Vec<String>,
    /// Absent when there were none, so the usual body stays `{"ready":true,"reasons":[]}`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub state_files_set_aside: Vec<SetAside>,
}

/// A state file that did not parse at start and where it was moved. The parse error stays in
/// the log: serde's messages quote the file's content, and these files hold secrets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetAside {
    pub file: String,
    pub moved_to: String,
}

impl Readiness {
    pub fn check(sources: &Sources) -> Self {
        let mut reasons = Vec::new();
        let mut state_files_set_aside = Vec::new();
        match sources.engine.get() {
            None => reasons.push("engine not started yet".to_string()),
            Some(engine) => {
                state_files_set_aside = engine
                    .store()
                    .corrupt_files()
                    .into_iter()
                    .map(|c| SetAside {
                        file: c.file.display().to_string(),
                        moved_to: c.moved_to.display().to_string(),
                    })
                    .collect();
                if engine.store().degraded() {
                    reasons.push(
                        "store degraded: the store does not answer, counting locally".to_string(),
                    );
                }
                if let Some(why) = engine.store().not_following() {
                    reasons.push(format!(
                        "lockout stream not followed: other hosts' lockouts do not reach this \
                         host ({why})"
                    ));
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
            state_files_set_aside,
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
