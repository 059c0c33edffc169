//! The run loop: each log line, in order, through the real engine of every config being
//! replayed (one, or two with `--compare`), each engine on its own injected clock set to the
//! line's time, over an in-memory embedded store, pushing nothing to a kernel.
//!
//! - Nothing touches disk: [`EmbeddedStore::in_memory`] never opens the state directory.
//! - Shadow mode is switched off: a replay is already a dry run, and it reports what enforcing
//!   would do, strikes and lockouts included.
//! - API keys cannot be verified (the log has no key store): with the lookups never landing, a
//!   well-formed key is metered as the daemon meters a key whose lookup is in flight, one rung
//!   down (the session rung), counted by address.
//! - The clock never goes backwards: a line stamped a little earlier than one before it is
//!   decided at the latest time seen, and counted as out of order; a line stamped far from the
//!   lines around it is malformed and does not move the clock (the rule is [`super::order`]'s).
//! - A log that cannot be read to its end (a truncated gzip, an I/O error) ends the run there:
//!   the report covers the lines read before it and says where it was cut short.
//! - Signed agents cannot be verified either (a log keeps the `Signature-Agent` field at best,
//!   never the signature or its time): when the config verifies agents, a logged
//!   `Signature-Agent` naming one is metered as that agent, its own rung, and reported as a
//!   claimed agent.
//! - One line buffer and one header map per config are reused: a line without credentials
//!   allocates nothing here.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::client::{client, network_of, parse_addr};
use super::combined::{self, ExtraField};
use super::error::ReplayError;
use super::input::{LogReader, NextLine};
use super::json;
use super::line::{LogLine, Malformed};
use super::order::{Order, Place};
use super::report::{CutShort, Input, Report, SkippedLine};
use super::tally::Tally;
use crate::clock::ManualClock;
use crate::config::Config;
use crate::embedded::EmbeddedStore;
use crate::engine::sink::NoKernel;
use crate::engine::{Engine, EngineOptions, KeyRefresh, RequestView};
use crate::identity::client_ip::group;
use crate::identity::client_ip::Client;
use crate::identity::hash::IdentityHasher;

static SIGNATURE_AGENT: HeaderName = HeaderName::from_static("signature-agent");

/// How many malformed lines the report names.
pub const MALFORMED_SHOWN: usize = 5;

/// How lines are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON for a line that starts with `{`, combined for any other.
    #[default]
    Auto,
    Combined,
    Json,
}

/// What the run needs besides the configs and logs.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub format: Format,
    /// The quoted fields after the user agent of combined lines.
    pub fields: Vec<ExtraField>,
    /// Believe the logged `X-Forwarded-For` whoever the logged peer is.
    pub xff: bool,
    /// How many identities and networks the report lists.
    pub top: usize,
}

/// One config being replayed.
struct Side {
    name: String,
    cfg: Arc<Config>,
    clock: ManualClock,
    engine: Engine,
    key_header: HeaderName,
    headers: HeaderMap,
    tally: Tally,
}

impl Side {
    fn new(name: String, cfg: &Config, hasher: IdentityHasher) -> Side {
        let mut cfg = cfg.clone();
        cfg.engine.shadow = false;
        cfg.agents.claims_only = true;
        cfg.routes.default.shadow = false;
        for r in &mut cfg.routes.routes {
            r.shadow = false;
        }
        let cfg = Arc::new(cfg);
        let clock = ManualClock::new(0);
        let store = Arc::new(EmbeddedStore::in_memory(&cfg.store, hasher));
        let engine = Engine::with_options(
            Arc::clone(&cfg),
            store,
            Arc::new(NoKernel),
            Arc::new(clock.clone()),
            EngineOptions {
                key_refresh: KeyRefresh::Manual,
            },
        );
        Side {
            name,
            key_header: cfg.keys.header.clone(),
            cfg,
            clock,
            engine,
            headers: HeaderMap::new(),
            tally: Tally::default(),
        }
    }

    fn decide(&mut self, line: &LogLine<'_>, peer: IpAddr, now_ms: u64, always_xff: bool) {
        self.headers.clear();
        let fields = [
            (&http::header::COOKIE, &line.cookie),
            (&http::header::AUTHORIZATION, &line.authorization),
            (&self.key_header, &line.api_key),
            (&SIGNATURE_AGENT, &line.signature_agent),
        ];
        for (name, value) in fields {
            // A value no header could carry (a control byte) is as good as absent.
            if let Some(v) = value.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                self.headers.append(name.clone(), v);
            }
        }
        self.clock.set_ms(now_ms);
        let id = &self.cfg.identity;
        let ip = client(peer, line.xff.as_deref(), id, always_xff);
        // A method no request could carry is metered as a GET, on its path's route.
        let method = http::Method::from_bytes(line.method.as_bytes()).unwrap_or_default();
        let d = self.engine.decide(&RequestView {
            client: Client::Addr(ip),
            method: &method,
            path: &line.target,
            headers: &self.headers,
        });
        let nets = &self.cfg.networks;
        let net = network_of(ip, nets.ipv4_prefix, nets.ipv6_prefix);
        self.tally.record(&d, group(ip, id.ipv6_prefix), net);
    }
}

fn parse<'a>(text: &'a str, opts: &Options) -> Result<LogLine<'a>, Malformed> {
    let json = match opts.format {
        Format::Auto => text.trim_start().starts_with('{'),
        Format::Combined => false,
        Format::Json => true,
    };
    if json {
        json::parse(text)
    } else {
        combined::parse(text, &opts.fields)
    }
}

/// A line held until the next one confirms its time (see [`super::order`]).
struct Held {
    text: String,
    file: String,
    line: u64,
}

/// The state of one run: the sides, what reading found, the first time decided.
struct Run<'o> {
    sides: Vec<Side>,
    input: Input,
    first: Option<u64>,
    opts: &'o Options,
}

impl Run<'_> {
    fn skip(&mut self, file: &dyn std::fmt::Display, line: u64, why: Malformed) {
        self.input.malformed += 1;
        if self.input.malformed_first.len() < MALFORMED_SHOWN {
            self.input.malformed_first.push(SkippedLine {
                file: file.to_string(),
                line,
                why: why.as_str(),
            });
        }
    }

    fn decide(&mut self, line: &LogLine<'_>, peer: IpAddr, at: u64, late: bool) {
        if late {
            self.input.out_of_order += 1;
        }
        self.first.get_or_insert(at);
        self.input.requests += 1;
        for side in &mut self.sides {
            side.decide(line, peer, at, self.opts.xff);
        }
    }

    /// A held line, confirmed (decide it at `at`) or not.
    fn settled(&mut self, held: Held, res: Result<u64, Malformed>) {
        let at = match res {
            Ok(at) => at,
            Err(why) => return self.skip(&held.file, held.line, why),
        };
        // It parsed when it was read; parsing the copy again cannot fail.
        let parsed = parse(&held.text, self.opts)
            .ok()
            .and_then(|l| parse_addr(&l.addr).map(|peer| (l, peer)));
        match parsed {
            Some((l, peer)) => self.decide(&l, peer, at, false),
            None => self.skip(&held.file, held.line, Malformed::Syntax),
        }
    }
}

/// Replays `logs` (in the order given, as one stream) under each of `configs` (a name for the
/// report, and the config); one report per config, in order. A log that cannot be opened is an
/// error; one that cannot be read to its end gives the reports of what was read, with
/// [`Input::cut_short`] set.
pub fn replay(
    configs: &[(String, Config)],
    logs: &[PathBuf],
    opts: &Options,
) -> Result<Vec<Report>, ReplayError> {
    // One secret for every side: a caller is the same hashed identity in both columns.
    let hasher = IdentityHasher::hmac(&rand::random::<[u8; 32]>());
    let mut run = Run {
        sides: configs
            .iter()
            .map(|(name, cfg)| Side::new(name.clone(), cfg, hasher.clone()))
            .collect(),
        input: Input::default(),
        first: None,
        opts,
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut order: Order<Held> = Order::new(now_ms);
    let mut buf = Vec::with_capacity(4096);
    'logs: for path in logs {
        let mut reader = LogReader::open(path)?;
        loop {
            let next = match reader.next_line(&mut buf) {
                Ok(n) => n,
                Err(ReplayError::Read { path, line, source }) => {
                    run.input.cut_short = Some(CutShort {
                        file: path.display().to_string(),
                        after_line: line.saturating_sub(1),
                        error: source.to_string(),
                    });
                    break 'logs;
                }
                Err(e) => return Err(e),
            };
            let file = reader.path().display();
            match next {
                NextLine::End => break,
                NextLine::TooLong => {
                    run.input.lines += 1;
                    run.skip(&file, reader.line_no, Malformed::TooLong);
                    continue;
                }
                NextLine::Line => {}
            }
            let Ok(text) = std::str::from_utf8(&buf) else {
                run.input.lines += 1;
                run.skip(&file, reader.line_no, Malformed::Encoding);
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            run.input.lines += 1;
            let line = match parse(text, opts) {
                Ok(l) => l,
                Err(why) => {
                    run.skip(&file, reader.line_no, why);
                    continue;
                }
            };
            let Some(peer) = parse_addr(&line.addr) else {
                run.skip(&file, reader.line_no, Malformed::Address);
                continue;
            };
            if let Some((held, res)) = order.settle(line.time_ms) {
                run.settled(held, res);
            }
            match order.place(line.time_ms) {
                Place::Now { at, late } => run.decide(&line, peer, at, late),
                Place::Hold => order.hold(
                    line.time_ms,
                    Held {
                        text: text.to_string(),
                        file: file.to_string(),
                        line: reader.line_no,
                    },
                ),
                Place::Skip(why) => run.skip(&file, reader.line_no, why),
            }
        }
    }
    if let Some((held, res)) = order.finish() {
        run.settled(held, res);
    }
    run.input.set_span(run.first, order.clock());
    let (input, top) = (run.input, opts.top);
    Ok(run
        .sides
        .into_iter()
        .map(|s| Report::new(s.name, input.clone(), s.tally, top))
        .collect())
}
