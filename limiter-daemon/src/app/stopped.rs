//! The daemon's last log line: what stays in the kernel once it is gone. Read from the pin
//! directory at that moment, not assumed from the config: a daemon that attached leaves its
//! pins (enforcement continues), `kernel.mode = "off"` or an `auto` start that did not attach
//! leaves nothing of its own, and pins an earlier run left stay whatever this run's mode was
//! (the program they hold still enforces; `limiter-daemon detach` removes them).

use std::path::Path;

use crate::config::kernel::{KernelMode, KernelSettings};
use crate::kernel::pins::{PinLayout, PinnedAttachment};
use crate::kernel::KernelError;

/// Logs what stays in the kernel after this process, per `kernel`.
pub fn log_stopped(kernel: &KernelSettings) {
    let layout = PinLayout::new(&kernel.pin_path);
    let pinned = layout.attachments();
    let pins = pinned.as_ref().map_or(0, Vec::len);
    tracing::info!(
        event = "stopped",
        kernel_mode = mode_name(kernel.mode),
        pins,
        "{}",
        stop_message(kernel.mode, layout.root(), &pinned)
    );
}

fn mode_name(mode: KernelMode) -> &'static str {
    match mode {
        KernelMode::Auto => "auto",
        KernelMode::Required => "required",
        KernelMode::Off => "off",
    }
}

/// The sentence for `mode` and what the pin directory at `root` holds.
fn stop_message(
    mode: KernelMode,
    root: &Path,
    pinned: &Result<Vec<PinnedAttachment>, KernelError>,
) -> String {
    let root = root.display();
    let links = match pinned {
        Ok(links) => links,
        Err(e) => {
            return format!(
                "stopped; the kernel pins at {root} cannot be read ({e}): \
                 `limiter-daemon kernel status` says what stays in the kernel"
            )
        }
    };
    let on = links
        .iter()
        .map(|l| format!("{} ({})", l.iface, l.mode))
        .collect::<Vec<_>>()
        .join(", ");
    match (mode, links.is_empty()) {
        (KernelMode::Off, true) => "stopped; kernel.mode = \"off\": this run attached no kernel \
                                    program and nothing stays in the kernel"
            .to_string(),
        (KernelMode::Off, false) => format!(
            "stopped; kernel.mode = \"off\" left the pins an earlier run made at {root} as they \
             were: the program they hold stays attached on {on} and enforces the lockouts it had \
             (`limiter-daemon detach` removes them)"
        ),
        (_, true) => format!(
            "stopped; no kernel program is pinned at {root} (kernel.mode = \"{}\" did not \
             attach, or it was detached): nothing stays in the kernel",
            mode_name(mode)
        ),
        (_, false) => format!(
            "stopped; kernel pins stay in place at {root} on {on}: enforcement continues \
             without the daemon (`limiter-daemon detach` removes them)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::pins::AttachedMode;

    #[test]
    fn each_mode_says_what_stays() {
        let root = Path::new("/sys/fs/bpf/limiter");
        let none = Ok(Vec::new());
        let eth0 = Ok(vec![PinnedAttachment {
            iface: "eth0".into(),
            mode: AttachedMode::Xdp,
            path: root.join("links/eth0:xdp"),
        }]);
        let off = stop_message(KernelMode::Off, root, &none);
        assert!(
            off.contains("nothing stays") && !off.contains("stay in place"),
            "{off}"
        );
        let left = stop_message(KernelMode::Off, root, &eth0);
        assert!(
            left.contains("earlier run") && left.contains("eth0 (xdp)"),
            "{left}"
        );
        let auto = stop_message(KernelMode::Auto, root, &none);
        assert!(auto.contains("\"auto\" did not attach"), "{auto}");
        let attached = stop_message(KernelMode::Required, root, &eth0);
        assert!(attached.contains("pins stay in place"), "{attached}");
        assert!(attached.contains("enforcement continues"), "{attached}");
    }
}
