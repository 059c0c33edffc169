//! What one access log line says. A surface starts a [`Record`] when the request's head is
//! read (so the strings it borrows can be copied before the buffer moves on), adds the
//! decision's [`Verdict`] once known, and hands it to [`super::AccessLog::finish`] with the
//! status and the bytes sent.
//!
//! What is never recorded: the query string (it may carry a token), cookies, `Authorization`,
//! API keys. The caller's identity appears only as the engine's hashed identity.

use std::net::IpAddr;
use std::time::{Instant, SystemTime};

use http::{Method, Version};

use crate::model::{Action, Decision, IdentityText, Reason, Tier};

/// Which surface answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// The reverse proxy (HTTP/1.1, HTTP/2, TLS).
    Proxy,
    /// `POST /v1/decide`.
    Decide,
    /// Forward auth: `/v1/auth` (and Envoy's `/v1/auth/envoy/…`).
    Auth,
    /// Envoy's gRPC services (ext_authz `Check`, `ShouldRateLimit`).
    Grpc,
}

impl Surface {
    pub fn as_str(self) -> &'static str {
        match self {
            Surface::Proxy => "proxy",
            Surface::Decide => "decide",
            Surface::Auth => "auth",
            Surface::Grpc => "grpc",
        }
    }
}

/// What the decision said, as the log writes it.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub tier: Tier,
    pub action: Action,
    /// Why a request was refused or delayed.
    pub reason: Option<Reason>,
    pub delay_ms: u64,
    /// The engine's hashed identity (never a raw address, key or token).
    pub identity: IdentityText,
    /// In shadow mode: what enforcing would have done.
    pub shadow: Option<(Action, Option<Reason>)>,
}

impl Verdict {
    pub fn of(d: &Decision) -> Verdict {
        Verdict {
            tier: d.tier,
            action: d.action(),
            reason: d.reason(),
            delay_ms: u64::try_from(d.delay().as_millis()).unwrap_or(u64::MAX),
            identity: d.identity.clone(),
            shadow: d.shadowed().map(|s| (s.action(), s.reason())),
        }
    }
}

/// One line in the making. Sent boxed: the request side moves a pointer into the channel.
#[derive(Debug)]
pub struct Record {
    pub(super) wall: SystemTime,
    pub(super) started: Instant,
    pub surface: Surface,
    /// The TCP peer.
    pub peer: IpAddr,
    /// The client as resolved (a trusted proxy's forwarding field walked).
    pub client: IpAddr,
    pub method: Method,
    pub version: Version,
    /// Host, path and user agent, one after the other (one allocation per line).
    text: String,
    host_end: usize,
    path_end: usize,
    pub status: u16,
    /// Response body bytes sent.
    pub bytes: u64,
    pub(super) duration_us: u64,
    pub verdict: Option<Verdict>,
}

/// What a surface knows of a request when it starts its line.
pub struct Seen<'a> {
    pub surface: Surface,
    pub peer: IpAddr,
    pub client: IpAddr,
    pub method: &'a Method,
    pub version: Version,
    pub host: &'a [u8],
    /// The path without its query string.
    pub path: &'a str,
    pub user_agent: &'a [u8],
}

impl Record {
    pub(super) fn new(seen: &Seen<'_>) -> Record {
        let host = String::from_utf8_lossy(seen.host);
        let ua = String::from_utf8_lossy(seen.user_agent);
        // The query never reaches the log (tokens ride in it); callers pass the path alone.
        let path = seen.path.split('?').next().unwrap_or("");
        let mut text = String::with_capacity(host.len() + path.len() + ua.len());
        text.push_str(&host);
        let host_end = text.len();
        text.push_str(path);
        let path_end = text.len();
        text.push_str(&ua);
        Record {
            wall: SystemTime::now(),
            started: Instant::now(),
            surface: seen.surface,
            // `::ffff:a.b.c.d` from a dual-stack socket reads as `a.b.c.d`, as the client does.
            peer: crate::model::address::canonical_ip(seen.peer),
            client: crate::model::address::canonical_ip(seen.client),
            method: seen.method.clone(),
            version: seen.version,
            text,
            host_end,
            path_end,
            status: 0,
            bytes: 0,
            duration_us: 0,
            verdict: None,
        }
    }

    pub fn host(&self) -> &str {
        &self.text[..self.host_end]
    }

    pub fn path(&self) -> &str {
        &self.text[self.host_end..self.path_end]
    }

    pub fn user_agent(&self) -> &str {
        &self.text[self.path_end..]
    }

    /// Describes the request decided on instead of the one that asked (`/v1/decide` and
    /// forward auth ask about another request): its client, method, path and (when known)
    /// host.
    pub fn describe(&mut self, client: IpAddr, method: &Method, host: Option<&[u8]>, path: &str) {
        let host = match host {
            Some(h) => String::from_utf8_lossy(h).into_owned(),
            None => self.host().to_string(),
        };
        let ua = self.user_agent().to_string();
        let path = path.split('?').next().unwrap_or("");
        self.text.clear();
        self.text.push_str(&host);
        self.host_end = self.text.len();
        self.text.push_str(path);
        self.path_end = self.text.len();
        self.text.push_str(&ua);
        self.client = client;
        self.method = method.clone();
    }

    /// Records what `d` decided.
    pub fn decided(&mut self, d: &Decision) {
        self.verdict = Some(Verdict::of(d));
    }

    /// The request's duration in milliseconds.
    pub fn duration_ms(&self) -> f64 {
        self.duration_us as f64 / 1000.0
    }

    /// When the request arrived.
    pub fn time(&self) -> SystemTime {
        self.wall
    }
}

/// `resp`, carrying `verdict` (when there is one) for the surface that finishes the line.
pub fn mark<B>(mut resp: http::Response<B>, verdict: Option<Verdict>) -> http::Response<B> {
    if let Some(v) = verdict {
        resp.extensions_mut().insert(v);
    }
    resp
}
