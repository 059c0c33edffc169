//! The running kernel dataplane: what `run` starts and the engine pushes lockouts into.
//!
//! [`Dataplane::start`] honours `[kernel] mode`: `off` never touches the kernel, `auto` logs loudly
//! and returns `None` when the kernel half cannot start (no root, no object, no BPF), `required`
//! makes that an error. Its background tasks (program logs, sampled events, the expiry sweep)
//! stop when the `stop` token given to `start` is cancelled, or when the `Dataplane` drops
//! (which aborts them as a backstop). Neither removes a pin, so enforcement and lockouts
//! survive a crash or a restart; only `detach` removes them.

use std::sync::Arc;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use aya::Ebpf;
use limiter_common::maps::MAP_EVENTS;
use tokio_util::sync::CancellationToken;

use super::events::{self, EventStats};
use super::loader::{self, Attachment};
use super::maps::KernelMaps;
use super::object::{self, ObjectSource};
use super::pins::PinLayout;
use super::status::{self, KernelStatus};
use super::{logs, KernelError};
use crate::config::kernel::{KernelMode, KernelSettings};

/// How often expired lockouts and deny entries are removed from the maps.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);

pub struct Dataplane {
    settings: KernelSettings,
    object: ObjectSource,
    maps: Arc<KernelMaps>,
    attachments: Vec<Attachment>,
    events: Arc<EventStats>,
    /// Cancelled with the caller's token, or on drop: what the background tasks stop on.
    stop: CancellationToken,
    /// Aborted on drop as well, in case a task is between two awaits of a long step.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Holds the loaded programs' fds; the pinned links keep them attached regardless.
    _ebpf: Ebpf,
}

impl std::fmt::Debug for Dataplane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataplane")
            .field("object", &self.object)
            .field("pin_path", &self.settings.pin_path)
            .field("attachments", &self.attachments)
            .finish_non_exhaustive()
    }
}

impl Dataplane {
    /// Starts the dataplane as `settings.mode` says. Call it inside a tokio runtime to have the
    /// program's logs, sampled events and the expiry sweep run in the background until `stop`
    /// is cancelled (or the dataplane drops).
    pub fn start(
        settings: &KernelSettings,
        stop: &CancellationToken,
    ) -> Result<Option<Self>, KernelError> {
        match settings.mode {
            KernelMode::Off => {
                tracing::warn!(
                    "kernel dataplane off by config (kernel.mode = \"off\"): userspace-only"
                );
                Ok(None)
            }
            KernelMode::Required => Self::start_required(settings, stop).map(Some),
            KernelMode::Auto => match Self::start_required(settings, stop) {
                Ok(dp) => Ok(Some(dp)),
                Err(err) => {
                    tracing::error!(
                        error = %super::error::chain(&err),
                        "KERNEL DATAPLANE NOT RUNNING: continuing userspace-only (kernel.mode = \"auto\"); \
                         set kernel.mode = \"required\" to make this fatal"
                    );
                    Ok(None)
                }
            },
        }
    }

    /// Starts the dataplane or fails: loads, writes the config, attaches every interface.
    /// Background tasks as in [`Dataplane::start`].
    pub fn start_required(
        settings: &KernelSettings,
        stop: &CancellationToken,
    ) -> Result<Self, KernelError> {
        if settings.interfaces.is_empty() {
            return Err(KernelError::NoInterfaces);
        }
        let object = object::find_object()?;
        let layout = PinLayout::new(&settings.pin_path);
        let mut ebpf = loader::load(&object, &layout)?;
        let maps = Arc::new(KernelMaps::open(&layout)?);
        // Config before attaching, so the first packet is judged with the configured numbers.
        maps.write_config(settings)?;
        // The program trusts the lockout cache to say which keys need the hash: pins adopted from
        // a build without the cache (or a crash between a hash and a cache write) must be made
        // consistent before this program sees a packet.
        maps.rebuild_lockout_cache()?;
        let mut attachments: Vec<Attachment> = Vec::new();
        for iface in &settings.interfaces {
            match loader::attach(&mut ebpf, &layout, iface, settings.attach) {
                Ok(a) => attachments.push(a),
                Err(err) => {
                    // Undo what this start attached; adopted links were there before and stay.
                    for a in attachments.iter().filter(|a| !a.adopted) {
                        let path = layout.link(&a.iface, a.mode);
                        if let Err(e) = std::fs::remove_file(&path) {
                            tracing::warn!(path = %path.display(), error = %e, "rolling back an attachment failed");
                        }
                    }
                    return Err(err);
                }
            }
        }
        let events = Arc::new(EventStats::default());
        let mut dp = Dataplane {
            settings: settings.clone(),
            object: object.source,
            maps,
            attachments,
            events,
            stop: stop.child_token(),
            tasks: Vec::new(),
            _ebpf: ebpf,
        };
        dp.spawn_background();
        tracing::info!(
            object = %dp.object,
            pin_path = %settings.pin_path.display(),
            interfaces = ?dp.attachments.iter().map(|a| format!("{}:{}{}", a.iface, a.mode, if a.adopted { " (adopted)" } else { "" })).collect::<Vec<_>>(),
            "kernel dataplane ready"
        );
        Ok(dp)
    }

    fn spawn_background(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::debug!("no tokio runtime: program logs, events and sweeps are not started");
            return;
        };
        if let Some(logger) = logs::take_logger(&mut self._ebpf) {
            self.tasks
                .push(rt.spawn(until(self.stop.clone(), logs::run(logger))));
        }
        match self
            ._ebpf
            .take_map(MAP_EVENTS)
            .map(RingBuf::<MapData>::try_from)
        {
            Some(Ok(ring)) => self.tasks.push(rt.spawn(until(
                self.stop.clone(),
                events::run(ring, Arc::clone(&self.events)),
            ))),
            Some(Err(err)) => tracing::warn!(error = %err, "event map is not a ring buffer"),
            None => tracing::warn!("the eBPF object has no {MAP_EVENTS} map"),
        }
        let maps = Arc::clone(&self.maps);
        self.tasks.push(rt.spawn(until(self.stop.clone(), async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            loop {
                tick.tick().await;
                let maps = Arc::clone(&maps);
                match tokio::task::spawn_blocking(move || maps.sweep_expired()).await {
                    Ok(Ok(s)) if s.lockouts + s.denies > 0 => {
                        tracing::info!(
                            lockouts = s.lockouts,
                            denies = s.denies,
                            "removed expired kernel entries"
                        )
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(err)) => {
                        tracing::warn!(error = %super::error::chain(&err), "sweeping expired kernel entries failed")
                    }
                    Err(err) => tracing::warn!(error = %err, "sweep task failed"),
                }
            }
        })));
    }

    /// Typed map operations (lockouts, tiers, lists, counters).
    pub fn maps(&self) -> &Arc<KernelMaps> {
        &self.maps
    }

    pub fn attachments(&self) -> &[Attachment] {
        &self.attachments
    }

    pub fn settings(&self) -> &KernelSettings {
        &self.settings
    }

    /// Sampled over-ceiling events read from the ring buffer.
    pub fn event_stats(&self) -> &Arc<EventStats> {
        &self.events
    }

    /// The same report as `kernel status`.
    pub fn status(&self) -> Result<KernelStatus, KernelError> {
        status::gather(self.maps.layout(), &self.maps)
    }

    /// Rewrites the kernel config (on reload).
    pub fn reconfigure(&mut self, settings: &KernelSettings) -> Result<(), KernelError> {
        self.maps.write_config(settings)?;
        self.settings = settings.clone();
        Ok(())
    }
}

/// Runs `task` until `stop` is cancelled.
async fn until(stop: CancellationToken, task: impl std::future::Future<Output = ()>) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = task => {}
    }
}

impl Drop for Dataplane {
    fn drop(&mut self) {
        self.stop.cancel();
        for t in &self.tasks {
            t.abort();
        }
    }
}
