//! `limiter-daemon run`: load and validate the whole config (HTTP section included) before
//! binding anything, start the kernel dataplane as `[kernel] mode` says, open the store that
//! `[store] backend` names ([`crate::fleet::open`]), build the engine (which pushes the stored
//! lockouts and allow/deny lists into the kernel: a reboot empties its maps), and serve the HTTP
//! surfaces (and the metrics listener) until SIGINT or SIGTERM. SIGHUP reloads the config
//! ([`super::reload::Reloader`]).
//!
//! One [`Shutdown`] is made here and handed to every background task: the signal wait
//! triggers it, the HTTP server and the metrics listener stop on it, the dataplane's tasks get
//! a child token of it, and so do the key cache's refresher thread and the crawler-DNS thread,
//! which hold the drain open until they have ended; the crawler range-file poll is a task on it.
//!
//! Kernel pins outlive the process on purpose (enforcement continues across restarts;
//! `limiter-daemon detach` removes them).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;

use super::reload::{ReloadTargets, Reloader};
use super::shutdown::Shutdown;
use super::signals::{ReloadSignal, ReopenSignal, ShutdownSignals};
use crate::clock::{Clock, SystemClock};
use crate::config::http::HttpSettings;
use crate::config::log::LogFormat;
use crate::config::{env_from_process, Config};
use crate::edge::listen::budget::ConnectionBudget;
use crate::edge::listen::limits::ListenLimits;
use crate::edge::render::response::Hints;
use crate::engine::sink::{EnforcementSink, NoKernel};
use crate::engine::{Engine, EngineOptions, KeyRefresh};
use crate::kernel::dataplane::Dataplane;
use crate::metrics::server::MetricsServer;
use crate::metrics::sources::AttachedKernel;
use crate::metrics::{KernelSource, MeteredDecider, Metrics};
use crate::proxy::server::HttpServer;

/// Everything `run` needs, validated: the process exits before binding if any of it is wrong.
pub struct DaemonConfig {
    pub config: Config,
    pub http: HttpSettings,
    /// The file's text as loaded (a reload lists what changed against it; its hash is a metric).
    pub text: String,
}

impl DaemonConfig {
    pub fn load(path: &Path) -> Result<Self, crate::config::ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| crate::config::ConfigError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        let config = Config::from_toml_str(&text, path, &env_from_process())?;
        let http = config.http.clone();
        Ok(DaemonConfig { config, http, text })
    }
}

/// What `serve` needs to build the reloader besides the config.
struct ReloadSource {
    path: PathBuf,
    text: String,
    ifaces: Vec<String>,
    log_flag: Option<LogFormat>,
    signal: ReloadSignal,
    /// SIGUSR1: reopen the access log.
    reopen: ReopenSignal,
}

/// `log_flag`: `--log-format` when given (it wins over `[log] format`, on reload too).
pub fn run(path: &Path, ifaces: Vec<String>, log_flag: Option<LogFormat>) -> anyhow::Result<()> {
    let DaemonConfig {
        mut config,
        http,
        text,
    } = DaemonConfig::load(path)?;
    if !ifaces.is_empty() {
        config.kernel.interfaces.clone_from(&ifaces);
    }
    // Before anything opens a descriptor: the listeners' caps follow the limit in force.
    super::nofile::raise_and_log();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = http.worker_threads {
        builder.worker_threads(n.get());
    }
    let rt = builder
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        // First thing: a signal during attach or bind triggers the stop the servers see at once.
        let signals = ShutdownSignals::install()?;
        let hup = ReloadSignal::install()?;
        let usr1 = ReopenSignal::install()?;
        let shutdown = Shutdown::new();
        shutdown.trigger_on(signals.recv());
        let grace = http.shutdown_grace;
        let reload = ReloadSource {
            path: path.to_path_buf(),
            text,
            ifaces,
            log_flag,
            signal: hup,
            reopen: usr1,
        };
        let kernel = config.kernel.clone();
        let served = serve(config, http, reload, &shutdown).await;
        // Whatever ended serving (a signal or a failure), stop the rest, within the grace.
        shutdown.wait_drained(grace).await;
        served?;
        super::stopped::log_stopped(&kernel);
        Ok(())
    })
}

/// Starts the dataplane and the engine, spawns the metrics listener on `shutdown` and serves
/// HTTP until `shutdown` is triggered.
async fn serve(
    config: Config,
    http: HttpSettings,
    reload: ReloadSource,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    let listeners = http.api_listen.len()
        + http.grpc.listen.len()
        + usize::from(config.admin.listen.is_some())
        + usize::from(config.metrics.listen.is_some());
    let proxy =
        http.upstream.is_some() && !(http.proxy_listen.is_empty() && http.tls_listen.is_empty());
    ConnectionBudget::for_process(&http).log(proxy, listeners);
    // Inside the runtime: the dataplane spawns its log, event and expiry tasks.
    let metrics = Metrics::new(&config.metrics.namespace);
    let (sink, kernel): (Arc<dyn EnforcementSink>, Option<AttachedKernel>) =
        match Dataplane::start(&config.kernel, &shutdown.token())? {
            Some(dp) => {
                let attached = AttachedKernel {
                    maps: Arc::clone(dp.maps()),
                    events: Arc::clone(dp.event_stats()),
                    interfaces: dp.attachments().len(),
                };
                (Arc::new(dp), Some(attached))
            }
            None => {
                tracing::warn!(
                    "running userspace-only: lockouts are enforced at L7 only \
                     (metric kernel_attached = 0)"
                );
                (Arc::new(NoKernel), None)
            }
        };
    let kernel_maps = kernel.as_ref().map(|k| Arc::clone(&k.maps));
    metrics.attach_kernel(KernelSource {
        mode: config.kernel.mode,
        attached: kernel,
    });
    let metrics_listen = config.metrics.listen;
    // Opened before anything is bound: a path the daemon cannot write stops it here.
    let access_log = crate::edge::access_log::writer::start(
        &config.log.access,
        config.log.access_format,
        metrics.access_log_dropped.clone(),
    )?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = crate::fleet::open(&config.store, clock.now_ms()).context("opening the store")?;
    // Counters to disk every snapshot_interval and once more at stop (embedded store only).
    shutdown.spawn(crate::embedded::snapshotter::run(
        Arc::clone(&store),
        Arc::clone(&clock),
        config.store.snapshot_interval,
        shutdown.token(),
    ));
    let admin_kernel = crate::admin::state::KernelView {
        mode: config.kernel.mode,
        maps: kernel_maps.clone(),
    };
    let key_refresh = KeyRefresh::Until {
        stop: shutdown.token(),
        drain: shutdown.hold(),
    };
    let engine = Arc::new(Engine::with_options(
        Arc::new(config),
        store,
        sink,
        clock,
        EngineOptions { key_refresh },
    ));
    // Lockouts other hosts make reach this host's kernel (a fleet store only).
    engine.follow_fleet();
    // Published crawler ranges re-read when they change on disk, off the request path.
    shutdown.spawn(crate::engine::crawlers::watch_ranges(
        Arc::clone(&engine),
        shutdown.token(),
    ));
    // Published range lists and the ASN table fetched on a schedule (only when configured).
    shutdown.spawn(crate::fetch::proof_refresh::run(
        Arc::clone(&engine),
        shutdown.token(),
    ));
    // Signed agents' key directories, fetched behind the request.
    shutdown.spawn(crate::engine::agents::fetch_directories(
        Arc::clone(&engine),
        shutdown.token(),
    ));
    metrics.attach_engine(Arc::clone(&engine));
    let decider = Arc::new(MeteredDecider::new(
        Arc::clone(&engine) as _,
        Arc::clone(&metrics),
    ));
    let hints = Hints::from_settings(&http);
    let server = HttpServer::bind(&http, hints, decider)
        .await?
        .with_access_log(access_log.clone());
    shutdown.spawn_until(reload.reopen.serve(move || access_log.reopen()));
    metrics.attach_http(&server);
    // The charts' ring; a test compresses its time (see `sampler::Pace::Compressed`).
    let pace = match std::env::var("LIMITER_TEST_HISTORY_TICK_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(ms) => crate::metrics::sampler::Pace::Compressed {
            tick: std::time::Duration::from_millis(ms),
        },
        None => crate::metrics::sampler::Pace::Real,
    };
    shutdown.spawn(crate::metrics::sampler::run(
        Arc::clone(&metrics),
        pace,
        crate::clock::SystemClock.now_ms(),
        shutdown.token(),
    ));
    let admin_engine = Arc::clone(&engine);
    let reloader = Arc::new(Reloader::new(
        &reload.path,
        reload.text,
        reload.ifaces,
        reload.log_flag,
        ReloadTargets {
            engine,
            kernel: kernel_maps,
            gate: Some(server.hold_gate()),
            tunnels: Some(server.tunnels()),
            tls: Some(server.tls()),
            metrics: Arc::clone(&metrics),
        },
    ));
    // The admin API, on the same shutdown; its reload endpoint calls what SIGHUP calls.
    let admin = crate::admin::server::start(
        admin_engine,
        admin_kernel,
        reload.path.clone(),
        Some(reloader.hook()),
        Arc::clone(&metrics),
        ListenLimits::from_settings(&http),
    );
    if let Some(admin) = admin.await? {
        let stop = shutdown.cancelled();
        shutdown.spawn(async move {
            if let Err(err) = admin.run(stop).await {
                tracing::warn!(error = %format!("{err:#}"), "admin API failed");
            }
        });
    }
    let on_hup = Arc::clone(&reloader);
    shutdown.spawn_until(reload.signal.serve(move || {
        // Refusals are logged and counted by the reloader; nothing more to do with them here.
        let _ = on_hup.reload();
    }));
    match metrics_listen {
        Some(addr) => {
            let ms = MetricsServer::bind(addr, Arc::clone(&metrics))
                .await?
                .with_limits(ListenLimits::from_settings(&http));
            tracing::info!(addr = %ms.local_addr()?, "metrics, /healthz and /readyz listening");
            let stop = shutdown.cancelled();
            shutdown.spawn(async move {
                if let Err(err) = ms.run(stop).await {
                    tracing::warn!(error = %format!("{err:#}"), "metrics listener failed");
                }
            });
        }
        None => tracing::warn!("metrics listener disabled (metrics.listen = \"\")"),
    }
    crate::proxy::server::serve_bound(server, &http, shutdown.cancelled()).await?;
    Ok(())
}
