//! `FLAG_HAS_ALLOW`/`FLAG_HAS_DENY` in the config mirror "the allow/deny trie has entries", so the
//! program skips an empty trie without a lookup. Every change to a trie (add, remove, sweep) ends
//! with [`KernelMaps::sync_list_flags`]; a config write takes the flags from the tries the same
//! way (they persist across restarts in their pins).

use limiter_common::config::{FLAG_HAS_ALLOW, FLAG_HAS_DENY};
use limiter_common::maps::MAP_CONFIG;
use limiter_common::KernelConfig;

use super::handle::KernelMaps;
use crate::kernel::KernelError;

impl KernelMaps {
    /// Keeps `FLAG_HAS_ALLOW`/`FLAG_HAS_DENY` equal to "the trie has entries", so the program
    /// skips empty tries without a lookup.
    pub(super) fn sync_list_flags(&self) -> Result<(), KernelError> {
        let has_allow = !self.allow_is_empty();
        let has_deny = !self.deny_is_empty();
        let mut config = self.config.write();
        let mut cfg = config
            .get(&0, 0)
            .map_err(|e| KernelError::map_op("reading", MAP_CONFIG, e))?;
        let flags =
            (cfg.flags & !(FLAG_HAS_ALLOW | FLAG_HAS_DENY)) | list_flags(has_allow, has_deny);
        if flags == cfg.flags {
            return Ok(());
        }
        if cfg.v6_prefix_len == 0 {
            // Never written by a daemon: start from the program's defaults so that setting a flag
            // does not also zero every ceiling.
            cfg = KernelConfig::default();
        }
        cfg.flags =
            (cfg.flags & !(FLAG_HAS_ALLOW | FLAG_HAS_DENY)) | list_flags(has_allow, has_deny);
        config
            .set(0, cfg, 0)
            .map_err(|e| KernelError::map_op("writing", MAP_CONFIG, e))
    }

    pub(super) fn allow_is_empty(&self) -> bool {
        self.allow.read().keys().next().is_none()
    }

    pub(super) fn deny_is_empty(&self) -> bool {
        self.deny.read().keys().next().is_none()
    }
}

/// The list flags for "the allow trie has entries" and "the deny trie has entries".
pub(super) fn list_flags(has_allow: bool, has_deny: bool) -> u32 {
    let mut flags = 0;
    if has_allow {
        flags |= FLAG_HAS_ALLOW;
    }
    if has_deny {
        flags |= FLAG_HAS_DENY;
    }
    flags
}
