//! Loading the object, attaching per interface, pinning, adopting what is pinned, and detaching.
//!
//! Maps are pinned by name under the pin path, so a restarted daemon (or the CLI) reuses the same
//! lockouts, lists and counters. Each attachment is a bpf_link pinned as `links/<iface>:<mode>`.
//! On start, a pinned link for the interface is kept and its program swapped atomically for the
//! freshly loaded one (`bpf_link_update`): one program stays attached, never two, and there is no
//! instant without enforcement. The daemon drops its own link fds after pinning, so `detach`
//! (removing the pins) detaches even while a daemon runs.

use std::path::{Path, PathBuf};

use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::{SchedClassifierLink, TcAttachOptions};
use aya::programs::xdp::XdpLink;
use aya::programs::{LinkOrder, SchedClassifier, TcAttachType, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use limiter_common::maps::{ALL_MAPS, PROG_TC, PROG_XDP};
use serde::Serialize;

use super::object::Object;
use super::pins::{AttachedMode, PinLayout, PinnedAttachment};
use super::KernelError;
use crate::config::kernel::AttachMode;

/// Name of aya-log's ring buffer in the object (pinned-by-name copies are removed on detach).
const AYA_LOGS: &str = "AYA_LOGS";

/// One interface the program is attached to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attachment {
    pub iface: String,
    pub mode: AttachedMode,
    /// True when an existing pinned link was kept (its program replaced in place).
    pub adopted: bool,
}

/// Loads the object with every map pinned (or reused) under `layout`.
pub fn load(object: &Object, layout: &PinLayout) -> Result<Ebpf, KernelError> {
    layout.create_dirs()?;
    let had_maps = layout.has_maps();
    let paths: Vec<(&'static str, PathBuf)> = ALL_MAPS
        .iter()
        .map(|name| (*name, layout.map(name)))
        .collect();
    let mut loader = EbpfLoader::new();
    for (name, path) in &paths {
        loader.map_pin_path(name, path.as_path());
    }
    // Maps the object declares pinned-by-name that we do not know about stay under our dir too.
    loader.default_map_pin_directory(layout.root());
    loader
        .load(&object.bytes)
        .map_err(|source| KernelError::Load {
            object: object.source.to_string(),
            hint: if had_maps {
                format!(
                    " (maps pinned under {root} are reused; if they come from an incompatible \
                 build, run `limiter-daemon detach --pin-path {root}` first)",
                    root = layout.root().display()
                )
            } else {
                String::new()
            },
            source: Box::new(source),
        })
}

fn program_err(
    what: &'static str,
    name: &'static str,
) -> impl FnOnce(aya::programs::ProgramError) -> KernelError {
    move |source| KernelError::Program {
        what,
        name,
        source: Box::new(source),
    }
}

fn xdp_program(ebpf: &mut Ebpf) -> Result<&mut Xdp, KernelError> {
    let prog: &mut Xdp = ebpf
        .program_mut(PROG_XDP)
        .ok_or(KernelError::ProgramMissing { name: PROG_XDP })?
        .try_into()
        .map_err(program_err("typing", PROG_XDP))?;
    if prog.fd().is_err() {
        prog.load()
            .map_err(program_err("verifying/loading", PROG_XDP))?;
    }
    Ok(prog)
}

fn tc_program(ebpf: &mut Ebpf) -> Result<&mut SchedClassifier, KernelError> {
    let prog: &mut SchedClassifier = ebpf
        .program_mut(PROG_TC)
        .ok_or(KernelError::ProgramMissing { name: PROG_TC })?
        .try_into()
        .map_err(program_err("typing", PROG_TC))?;
    if prog.fd().is_err() {
        prog.load()
            .map_err(program_err("verifying/loading", PROG_TC))?;
    }
    Ok(prog)
}

/// Whether an existing attachment satisfies the configured mode.
fn satisfies(existing: AttachedMode, wish: AttachMode) -> bool {
    matches!(
        (wish, existing),
        (AttachMode::Auto, AttachedMode::Xdp | AttachedMode::XdpSkb)
            | (AttachMode::Xdp, AttachedMode::Xdp)
            | (AttachMode::XdpSkb, AttachedMode::XdpSkb)
            | (AttachMode::Tc, AttachedMode::Tc)
    )
}

/// Attaches (or adopts) the program on `iface` in mode `wish` and pins the link.
pub fn attach(
    ebpf: &mut Ebpf,
    layout: &PinLayout,
    iface: &str,
    wish: AttachMode,
) -> Result<Attachment, KernelError> {
    let existing: Vec<PinnedAttachment> = layout
        .attachments()?
        .into_iter()
        .filter(|a| a.iface == iface)
        .collect();
    for old in &existing {
        if satisfies(old.mode, wish) {
            match adopt(ebpf, old) {
                Ok(()) => {
                    tracing::info!(iface, mode = %old.mode, "adopted the pinned link; program replaced in place");
                    // Any other pinned link for this interface is stale (e.g. a mode change
                    // interrupted half-way): remove it so exactly one program stays attached.
                    for other in existing.iter().filter(|o| o.path != old.path) {
                        unpin_link(&other.path)?;
                    }
                    return Ok(Attachment {
                        iface: iface.to_string(),
                        mode: old.mode,
                        adopted: true,
                    });
                }
                Err(err) => {
                    // Typically the interface went away and came back: the link is defunct.
                    tracing::warn!(iface, error = %super::error::chain(&err), "pinned link cannot be reused; attaching afresh");
                }
            }
        }
    }
    // Nothing adoptable: remove what is pinned for this interface first (native and generic XDP
    // cannot coexist on one device), then attach in the configured mode.
    for old in &existing {
        if satisfies(old.mode, wish) {
            tracing::info!(iface, old = %old.mode, "removing the stale pinned link");
        } else {
            tracing::warn!(iface, old = %old.mode, wish = ?wish, "replacing an attachment made in a different mode");
        }
        unpin_link(&old.path)?;
    }
    let mode = attach_fresh(ebpf, layout, iface, wish)?;
    tracing::info!(iface, %mode, "attached and pinned");
    Ok(Attachment {
        iface: iface.to_string(),
        mode,
        adopted: false,
    })
}

/// Swaps the freshly loaded program into the pinned link.
fn adopt(ebpf: &mut Ebpf, old: &PinnedAttachment) -> Result<(), KernelError> {
    let link_err = |source| KernelError::Link {
        path: old.path.clone(),
        source: Box::new(source),
    };
    let fd_link = FdLink::from(PinnedLink::from_pin(&old.path).map_err(link_err)?);
    match old.mode {
        AttachedMode::Xdp | AttachedMode::XdpSkb => {
            let link = XdpLink::try_from(fd_link).map_err(link_err)?;
            let prog = xdp_program(ebpf)?;
            let id = prog
                .attach_to_link(link)
                .map_err(program_err("replacing in its link", PROG_XDP))?;
            // Dropping our handle leaves the link to its pin.
            drop(
                prog.take_link(id)
                    .map_err(program_err("releasing", PROG_XDP))?,
            );
        }
        AttachedMode::Tc => {
            let link = SchedClassifierLink::try_from(fd_link).map_err(link_err)?;
            let prog = tc_program(ebpf)?;
            let id = prog
                .attach_to_link(link)
                .map_err(program_err("replacing in its link", PROG_TC))?;
            drop(
                prog.take_link(id)
                    .map_err(program_err("releasing", PROG_TC))?,
            );
        }
    }
    Ok(())
}

fn attach_fresh(
    ebpf: &mut Ebpf,
    layout: &PinLayout,
    iface: &str,
    wish: AttachMode,
) -> Result<AttachedMode, KernelError> {
    let attach_err = |mode: AttachedMode| {
        move |source| KernelError::Attach {
            iface: iface.to_string(),
            mode: mode.as_str(),
            source: Box::new(source),
        }
    };
    match wish {
        AttachMode::Tc => {
            let prog = tc_program(ebpf)?;
            // TCX explicitly: a netlink tc filter cannot be pinned, so there is no silent fallback.
            let id = prog
                .attach_with_options(
                    iface,
                    TcAttachType::Ingress,
                    TcAttachOptions::TcxOrder(LinkOrder::default()),
                )
                .map_err(attach_err(AttachedMode::Tc))?;
            let link = prog
                .take_link(id)
                .map_err(program_err("releasing", PROG_TC))?;
            let fd = FdLink::try_from(link).map_err(|_| KernelError::NotPinnable {
                iface: iface.to_string(),
                mode: "tc",
            })?;
            pin(fd, &layout.link(iface, AttachedMode::Tc))?;
            Ok(AttachedMode::Tc)
        }
        AttachMode::Xdp | AttachMode::XdpSkb | AttachMode::Auto => {
            let prog = xdp_program(ebpf)?;
            let (first, fallback) = match wish {
                AttachMode::Xdp => (AttachedMode::Xdp, None),
                AttachMode::XdpSkb => (AttachedMode::XdpSkb, None),
                _ => (AttachedMode::Xdp, Some(AttachedMode::XdpSkb)),
            };
            let xdp_mode = |m| match m {
                AttachedMode::XdpSkb => XdpMode::Skb,
                _ => XdpMode::Driver,
            };
            let (id, mode) = match prog.attach(iface, xdp_mode(first)) {
                Ok(id) => (id, first),
                Err(err) => match fallback {
                    Some(fb) => {
                        tracing::warn!(iface, error = %super::error::chain(&err), "native XDP refused; falling back to generic (skb) XDP");
                        (
                            prog.attach(iface, xdp_mode(fb)).map_err(attach_err(fb))?,
                            fb,
                        )
                    }
                    None => return Err(attach_err(first)(err)),
                },
            };
            let link = prog
                .take_link(id)
                .map_err(program_err("releasing", PROG_XDP))?;
            let fd = FdLink::try_from(link).map_err(|_| KernelError::NotPinnable {
                iface: iface.to_string(),
                mode: mode.as_str(),
            })?;
            pin(fd, &layout.link(iface, mode))?;
            Ok(mode)
        }
    }
}

fn pin(link: FdLink, path: &Path) -> Result<(), KernelError> {
    // The returned PinnedLink is dropped at once: the pin, not this process, keeps it attached.
    link.pin(path).map(drop).map_err(|source| KernelError::Pin {
        path: path.to_path_buf(),
        source: Box::new(source),
    })
}

/// Removes a link pin; with no other holder the kernel detaches the program at once.
fn unpin_link(path: &Path) -> Result<(), KernelError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(KernelError::io(path, e)),
    }
}

/// What `detach` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DetachReport {
    pub links: Vec<String>,
    pub maps: Vec<String>,
    /// Entries left in the pin directory that are not ours (so it was kept).
    pub left_behind: Vec<String>,
}

/// Detaches every pinned link and removes every pinned map and the pin directories.
pub fn detach(layout: &PinLayout) -> Result<DetachReport, KernelError> {
    let mut report = DetachReport::default();
    for a in layout.attachments()? {
        unpin_link(&a.path)?;
        report.links.push(format!("{}:{}", a.iface, a.mode));
    }
    for name in ALL_MAPS.iter().copied().chain([AYA_LOGS]) {
        let path = layout.map(name);
        match std::fs::remove_file(&path) {
            Ok(()) => report.maps.push(name.to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(KernelError::io(&path, e)),
        }
    }
    for dir in [layout.links_dir(), layout.root().to_path_buf()] {
        match std::fs::remove_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => {
                // Not empty: something that is not ours lives there; never delete it.
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    report.left_behind.extend(
                        entries
                            .filter_map(Result::ok)
                            .map(|e| e.path().display().to_string())
                            .filter(|p| Path::new(p) != layout.links_dir()),
                    );
                }
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adoption_matches_the_configured_mode() {
        assert!(satisfies(AttachedMode::Xdp, AttachMode::Auto));
        assert!(satisfies(AttachedMode::XdpSkb, AttachMode::Auto));
        assert!(!satisfies(AttachedMode::Tc, AttachMode::Auto));
        assert!(satisfies(AttachedMode::Tc, AttachMode::Tc));
        assert!(!satisfies(AttachedMode::XdpSkb, AttachMode::Xdp));
        assert!(!satisfies(AttachedMode::Xdp, AttachMode::XdpSkb));
        assert!(!satisfies(AttachedMode::Xdp, AttachMode::Tc));
    }
}
