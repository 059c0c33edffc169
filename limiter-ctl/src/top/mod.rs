//! `limiterctl top`: a live terminal view of the admin API, polled every 2 s (stats, history,
//! lockouts): decisions per second by tier and action, sparklines of the last 15 minutes, the
//! top callers and networks, the crawlers and agents, the active lockouts. `l` locks the selected caller (after `y`),
//! `u` unlocks it, `q` quits. `--once` prints one frame as text and exits. [`state`] holds what
//! is shown and what keys do, [`view`] draws it (pure, tested on a test backend); this file is
//! the thin loop between the terminal and the admin API.

pub mod state;
pub mod view;

use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use serde_json::{json, Value};

use super::args::{Request, TopArgs};
use super::client::{NotAdminApi, Session};
use super::target::Target;
use state::{Action, Key, Snapshot, View};

/// How often the view polls.
pub const EVERY: Duration = Duration::from_secs(2);

fn request(method: http::Method, path: String, body: Option<Value>) -> Request {
    Request {
        method,
        path,
        body,
        paged: false,
    }
}

fn get(path: &str) -> Request {
    request(http::Method::GET, path.to_string(), None)
}

async fn ask(s: &Session, req: Request) -> anyhow::Result<Value> {
    let a = s.send(&req).await?;
    if !a.ok() {
        let detail = a.body.get("detail").and_then(Value::as_str).unwrap_or("");
        anyhow::bail!("{} {}: {} {detail}", req.method, req.path, a.status);
    }
    Ok(a.body)
}

/// One poll: what a frame is drawn from.
async fn poll(s: &Session) -> anyhow::Result<Snapshot> {
    let stats = ask(s, get("/admin/v1/stats?top=10")).await?;
    let history = ask(s, get("/admin/v1/history")).await?;
    let lockouts = ask(
        s,
        Request {
            paged: true,
            ..get("/admin/v1/lockouts")
        },
    )
    .await?;
    Ok(Snapshot::parse(&stats, &history, &lockouts))
}

/// Locks or unlocks through the admin API; the sentence for the message line.
async fn act(s: &Session, a: &Action, lock_for: &str) -> String {
    let (req, done) = match a {
        Action::Quit => return String::new(),
        Action::Lock(ip) => (
            request(
                http::Method::POST,
                "/admin/v1/lockouts".into(),
                Some(json!({"ip": ip, "for": lock_for, "reason": "limiterctl top"})),
            ),
            format!("locked {ip} for {lock_for}"),
        ),
        Action::Unlock(ip) => (
            request(
                http::Method::DELETE,
                format!("/admin/v1/lockouts/{}", ip.replace('/', "%2F")),
                None,
            ),
            format!("unlocked {ip}"),
        ),
    };
    match ask(s, req).await {
        Ok(_) => done,
        Err(e) => format!("refused: {e:#}"),
    }
}

fn key_of(code: KeyCode, mods: KeyModifiers) -> Option<Key> {
    match code {
        KeyCode::Char('c') if mods.contains(KeyModifiers::CONTROL) => Some(Key::Char('q')),
        KeyCode::Up => Some(Key::Up),
        KeyCode::Down => Some(Key::Down),
        KeyCode::Esc => Some(Key::Esc),
        KeyCode::Char(c) => Some(Key::Char(c)),
        _ => None,
    }
}

fn live(rt: &tokio::runtime::Runtime, s: &Session, mut v: View) -> std::io::Result<()> {
    let mut term = ratatui::init();
    let mut next = Instant::now();
    let out = loop {
        if Instant::now() >= next {
            match rt.block_on(poll(s)) {
                Ok(snap) => v.update(snap),
                Err(e) => v.message = format!("poll failed: {e:#}"),
            }
            next = Instant::now() + EVERY;
        }
        if let Err(e) = term.draw(|f| view::draw(f, &v)) {
            break Err(e);
        }
        let wait = next.saturating_duration_since(Instant::now());
        match event::poll(wait) {
            Err(e) => break Err(e),
            Ok(false) => continue,
            Ok(true) => {}
        }
        let key = match event::read() {
            Err(e) => break Err(e),
            Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => key_of(k.code, k.modifiers),
            Ok(_) => None,
        };
        match key.and_then(|k| v.key(k)) {
            None => {}
            Some(Action::Quit) => break Ok(()),
            Some(a) => {
                v.message = rt.block_on(act(s, &a, &v.lock_for));
                // Show the lockout at once rather than at the next tick.
                next = Instant::now();
            }
        }
    };
    ratatui::restore();
    out
}

/// Runs `top` against `target`. `Err` says why the daemon could not be watched (exit 3).
pub fn run(rt: &tokio::runtime::Runtime, target: &Target, args: &TopArgs) -> Result<(), String> {
    let session = match rt.block_on(Session::connect(target)) {
        Ok(s) => s,
        Err(e) if e.is::<NotAdminApi>() => return Err(format!("{} is {e}", target.url)),
        Err(e) => return Err(format!("daemon unreachable at {}: {e:#}", target.url)),
    };
    let mut v = View::new(&target.url, &args.lock_for);
    if args.once {
        let snap = rt.block_on(poll(&session)).map_err(|e| format!("{e:#}"))?;
        v.update(snap);
        println!("{}", view::text(&v, args.width));
        return Ok(());
    }
    live(rt, &session, v).map_err(|e| format!("the terminal: {e}"))
}
