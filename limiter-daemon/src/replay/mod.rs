//! `limiter-daemon replay`: an access log run through the real engine on the log's own
//! timestamps, to see what a config would have allowed, delayed and refused on one's own
//! traffic. Nothing is written to disk and nothing reaches a kernel.
//!
//! - [`line`]: the fields of one request; [`combined`] and [`json`] read them from nginx/Apache
//!   combined lines and JSON lines; [`time`] reads their timestamps.
//! - [`input`]: the log files, plain or gzip, lines capped in length.
//! - [`order`]: which lines move the clock (a line stamped far off is malformed instead).
//! - [`client`]: the client address (the logged peer, `X-Forwarded-For`) and its network.
//! - [`run`]: the loop, one engine per config on an injected clock and an in-memory store.
//! - [`tally`] counts decisions; [`report`] is what a run found; [`compare`] puts two side by
//!   side; [`render_text`] and [`render_json`] print them.

pub mod client;
pub mod combined;
pub mod compare;
pub mod error;
pub mod input;
pub mod json;
pub mod json_fast;
pub mod line;
pub mod order;
pub mod render_json;
pub mod render_text;
pub mod report;
pub mod run;
pub mod tally;
pub mod time;

use std::io::Write as _;
use std::path::PathBuf;

pub use self::combined::ExtraField;
pub use self::error::ReplayError;
pub use self::report::Report;
pub use self::run::{replay, Format, Options};

/// `limiter-daemon replay` arguments.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The config whose tiers, routes, quotas and lockout rules are replayed (environment
    /// overrides apply, as for `run`).
    #[arg(long)]
    pub config: PathBuf,
    /// A second config: replay the same log under both and print them side by side.
    #[arg(long)]
    pub compare: Option<PathBuf>,
    /// Line format; `auto` reads a line starting with `{` as JSON, any other as combined.
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    pub format: Format,
    /// Combined format: what the quoted fields after the user agent hold, in order (an
    /// extended `log_format`), e.g. `--fields xff,cookie,authorization`.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub fields: Vec<ExtraField>,
    /// Believe the logged X-Forwarded-For whoever the logged peer is (default: only from the
    /// config's `[identity] trusted_proxies`).
    #[arg(long)]
    pub xff: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// How many identities and networks to list.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Access logs, oldest first (gzip is read as such; `-` is standard input).
    #[arg(required = true)]
    pub logs: Vec<PathBuf>,
}

/// Runs the command: the report on stdout, the speed on stderr. A log cut short still prints
/// the report of what was read, then returns [`ReplayError::CutShort`] (exit 3).
pub fn run_cli(args: ReplayArgs) -> Result<(), ReplayError> {
    let env = crate::config::env_from_process();
    let mut configs = vec![(
        args.config.display().to_string(),
        crate::config::Config::load(&args.config, &env)?,
    )];
    if let Some(b) = &args.compare {
        configs.push((
            b.display().to_string(),
            crate::config::Config::load(b, &env)?,
        ));
    }
    let opts = Options {
        format: args.format,
        fields: args.fields,
        xff: args.xff,
        top: args.top,
    };
    let started = std::time::Instant::now();
    let mut reports = replay(&configs, &args.logs, &opts)?;
    let cut_short = reports.first().and_then(|r| r.input.cut_short.clone());
    let secs = started.elapsed().as_secs_f64();
    let lines = reports.first().map_or(0, |r| r.input.lines);
    eprintln!(
        "replayed {lines} lines in {secs:.2} s ({:.0} lines/s)",
        lines as f64 / secs.max(1e-9)
    );
    let out = match (reports.pop(), reports.pop()) {
        (Some(b), Some(a)) => {
            let c = compare::Comparison::new(a, b);
            if args.json {
                render_json::comparison(&c)
            } else {
                render_text::comparison(&c)
            }
        }
        (Some(r), None) if args.json => render_json::report(&r),
        (Some(r), None) => render_text::report(&r),
        (None, _) => String::new(),
    };
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{out}").and_then(|()| stdout.flush()) {
        // `replay … | head` closing the pipe early is not a failure.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(ReplayError::Write(e)),
        _ => {}
    }
    match cut_short {
        Some(c) => Err(ReplayError::CutShort {
            file: c.file,
            after_line: c.after_line,
            error: c.error,
        }),
        None => Ok(()),
    }
}
