//! The pin layout under the pin path (default `/sys/fs/bpf/limiter/`):
//!
//! ```text
//! <pin>/LIM_CONFIG, <pin>/LIM_LOCKOUT, …   every map in limiter_common::maps::ALL_MAPS
//! <pin>/links/<iface>:<mode>                one bpf_link per attached interface
//! ```
//!
//! bpffs holds only pinned objects and directories, so the attach mode lives in the link's file
//! name (`:` cannot appear in an interface name). A pinned link keeps the program attached after
//! the daemon exits; removing the pin (with no other holder) detaches it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::KernelError;

/// How a program is attached to one interface (what actually happened, not the configured wish).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum AttachedMode {
    /// Native (driver) XDP.
    #[serde(rename = "xdp")]
    Xdp,
    /// Generic (skb) XDP.
    #[serde(rename = "xdp-skb")]
    XdpSkb,
    /// TCX/clsact ingress classifier.
    #[serde(rename = "tc")]
    Tc,
}

impl AttachedMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AttachedMode::Xdp => "xdp",
            AttachedMode::XdpSkb => "xdp-skb",
            AttachedMode::Tc => "tc",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "xdp" => Some(AttachedMode::Xdp),
            "xdp-skb" => Some(AttachedMode::XdpSkb),
            "tc" => Some(AttachedMode::Tc),
            _ => None,
        }
    }
}

impl std::fmt::Display for AttachedMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A link pinned for one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedAttachment {
    pub iface: String,
    pub mode: AttachedMode,
    pub path: PathBuf,
}

/// Paths under one pin directory.
#[derive(Clone, Debug)]
pub struct PinLayout {
    root: PathBuf,
}

impl PinLayout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn map(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
    pub fn links_dir(&self) -> PathBuf {
        self.root.join("links")
    }
    pub fn link(&self, iface: &str, mode: AttachedMode) -> PathBuf {
        self.links_dir().join(format!("{iface}:{}", mode.as_str()))
    }

    /// Creates the pin directories (bpffs accepts mkdir).
    pub fn create_dirs(&self) -> Result<(), KernelError> {
        let links = self.links_dir();
        std::fs::create_dir_all(&links).map_err(|e| KernelError::io(&links, e))
    }

    /// True when the maps are pinned here (the config map is the marker).
    pub fn has_maps(&self) -> bool {
        self.map(limiter_common::maps::MAP_CONFIG).exists()
    }

    /// Links pinned here, sorted by interface; unknown file names are skipped (not ours).
    pub fn attachments(&self) -> Result<Vec<PinnedAttachment>, KernelError> {
        let dir = self.links_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(KernelError::io(&dir, e)),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| KernelError::io(&dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some((iface, mode)) = name.rsplit_once(':') else {
                continue;
            };
            let Some(mode) = AttachedMode::parse(mode) else {
                continue;
            };
            found.push(PinnedAttachment {
                iface: iface.to_string(),
                mode,
                path: entry.path(),
            });
        }
        found.sort_by(|a, b| a.iface.cmp(&b.iface));
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_round_trip_and_strangers_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let layout = PinLayout::new(dir.path());
        layout.create_dirs().unwrap();
        std::fs::write(layout.link("eth0.100", AttachedMode::XdpSkb), b"").unwrap();
        std::fs::write(layout.link("veth1", AttachedMode::Tc), b"").unwrap();
        std::fs::write(layout.links_dir().join("random"), b"").unwrap();
        std::fs::write(layout.links_dir().join("x:bogus"), b"").unwrap();
        let found = layout.attachments().unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].iface, "eth0.100");
        assert_eq!(found[0].mode, AttachedMode::XdpSkb);
        assert_eq!(found[1].iface, "veth1");
        assert_eq!(found[1].mode, AttachedMode::Tc);
    }

    #[test]
    fn missing_dir_means_nothing_attached() {
        let layout = PinLayout::new("/nonexistent/limiter-pins");
        assert!(layout.attachments().unwrap().is_empty());
        assert!(!layout.has_maps());
    }
}
