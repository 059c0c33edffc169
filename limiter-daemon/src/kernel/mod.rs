//! The kernel bridge: finds, loads, attaches and pins the XDP/TC program, adopts what a previous
//! daemon pinned, and drives its maps.
//!
//! - [`object`]: where the built eBPF object is.
//! - [`loader`]: load, attach (auto/xdp/xdp-skb/tc), pin, adopt, detach.
//! - [`pins`]: the layout of pins under the pin path.
//! - [`maps`]: typed map operations, one file per map or family under `maps/`: `handle`
//!   ([`KernelMaps`] and opening it), `config` (config and protected ports), `list_flags`,
//!   `lockouts`, `tiers`, `lists` (allow/deny tries), `sweep` (expiry), `counters`, `fill`; and the
//!   leaves they share: `open` (opening one pinned map), `capacity`, `opt_secs`.
//! - [`lockout_cache`]: the lockout hash and the array cache in front of it, written together. It
//!   opens its maps with `maps::open`, a leaf that imports neither it nor the map files, so the
//!   two never import each other.
//! - [`addr`]: IPs and CIDRs as map keys. [`clock`]: the kernel's clock (CLOCK_BOOTTIME).
//! - [`dataplane`]: the running dataplane; [`sink`]: the engine's enforcement sink on it.
//! - [`events`]: sampled over-ceiling events; [`logs`]: aya-log forwarded into tracing.
//! - [`status`]: the `kernel status` report; [`cli`]: the `kernel`, `detach` and `run` commands.

pub mod addr;
pub mod admin_call;
pub mod cli;
pub mod clock;
pub mod dataplane;
pub mod error;
pub mod events;
pub mod loader;
pub mod lockout_cache;
pub mod logs;
pub mod maps;
pub mod object;
pub mod pins;
pub mod sink;
pub mod status;

pub use dataplane::Dataplane;
pub use error::KernelError;
pub use maps::KernelMaps;
pub use pins::{AttachedMode, PinLayout};
