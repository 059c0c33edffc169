//! The ladder's proving ground, shared by `limiter-daemon`'s overload tests and `cargo xtask
//! bench overload`: an app of fixed capacity (so many slots of a fixed service time, the rest
//! waiting in line, first come first served), and an open-loop load of three kinds of caller
//! (tokio tasks, on the caller's runtime) sent through the daemon's proxy, each named by a trusted proxy's `X-Forwarded-For`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The app: `slots` requests served at once for `service` each, the rest waiting in line.
pub struct App {
    pub addr: SocketAddr,
    held: Arc<AtomicU32>,
    most: Arc<AtomicU32>,
    busy_us: Arc<AtomicU64>,
}

impl App {
    /// Starts it on a free loopback port, on the current tokio runtime. A request for `/slow`
    /// takes a second beside the slots (it holds the proxy's slot, not the app's).
    pub async fn start(slots: usize, service: Duration) -> App {
        let l = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = l.local_addr().expect("its address");
        // The line: a fair semaphore serves waiters in order.
        let line = Arc::new(tokio::sync::Semaphore::new(slots));
        let (held, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let busy_us = Arc::new(AtomicU64::new(0));
        let (h, m, b) = (Arc::clone(&held), Arc::clone(&most), Arc::clone(&busy_us));
        tokio::spawn(async move {
            loop {
                let Ok((mut c, _)) = l.accept().await else {
                    continue;
                };
                let (line, held, most, busy) = (
                    Arc::clone(&line),
                    Arc::clone(&h),
                    Arc::clone(&m),
                    Arc::clone(&b),
                );
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let slow = buf.starts_with(b"GET /slow ");
                            buf.drain(..end + 4);
                            most.fetch_max(
                                held.fetch_add(1, Ordering::SeqCst) + 1,
                                Ordering::SeqCst,
                            );
                            if slow {
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            } else {
                                let permit = line.acquire().await.expect("the line");
                                tokio::time::sleep(service).await;
                                busy.fetch_add(service.as_micros() as u64, Ordering::Relaxed);
                                drop(permit);
                            }
                            // Let go before answering: the proxy frees its slot on the answer.
                            held.fetch_sub(1, Ordering::SeqCst);
                            let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if c.write_all(ok).await.is_err() {
                                return;
                            }
                        }
                        match c.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        App {
            addr,
            held,
            most,
            busy_us,
        }
    }

    /// The most requests the app held at once (served or waiting).
    pub fn most(&self) -> u32 {
        self.most.load(Ordering::SeqCst)
    }

    /// Requests held now.
    pub fn held(&self) -> u32 {
        self.held.load(Ordering::SeqCst)
    }

    /// Service time spent so far, over every slot.
    pub fn busy(&self) -> Duration {
        Duration::from_micros(self.busy_us.load(Ordering::Relaxed))
    }
}

/// A kind of caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Who {
    /// `10.200.0.1`, with the API key.
    Sponsor,
    /// `10.200.0.2`, with a session cookie.
    Session,
    /// The anonymous caller at `10.1.<n>.9`.
    Anon(u8),
}

impl Who {
    pub fn client(self) -> String {
        match self {
            Who::Sponsor => "10.200.0.1".to_string(),
            Who::Session => "10.200.0.2".to_string(),
            Who::Anon(n) => format!("10.1.{n}.9"),
        }
    }

    pub fn is_anon(self) -> bool {
        matches!(self, Who::Anon(_))
    }
}

/// One request's fate.
#[derive(Debug)]
pub struct Outcome {
    pub who: Who,
    /// 0: no answer within the timeout.
    pub status: u16,
    pub latency: Duration,
    /// The response head, lower-case.
    pub head: String,
    pub body: String,
    /// When it was due, from the start of the load.
    pub at: Duration,
}

/// `GET path` as `who` on its own connection (`key`: the sponsor's API key), with `extra`
/// header lines; status (0 when none came within `timeout`), head (lower-case) and body.
pub async fn one(
    proxy: SocketAddr,
    path: &str,
    who: Who,
    key: &str,
    extra: &str,
    timeout: Duration,
) -> (u16, String, String) {
    let auth = match who {
        Who::Sponsor => format!("authorization: Bearer {key}\r\n"),
        Who::Session => "cookie: session=s1\r\n".to_string(),
        Who::Anon(_) => String::new(),
    };
    let head = format!(
        "GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\nx-forwarded-for: {}\r\n{auth}{extra}\r\n",
        who.client()
    );
    let exchange = async {
        let mut s = TcpStream::connect(proxy).await.ok()?;
        s.write_all(head.as_bytes()).await.ok()?;
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        Some(out)
    };
    let out = tokio::time::timeout(timeout, exchange)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// An open-loop trace of `secs`: Poisson arrivals at these rates (req/s), seeded; anonymous
/// requests spread over 200 addresses. Sorted by time.
pub fn trace(seed: u64, secs: f64, sponsor: f64, session: f64, anon: f64) -> Vec<(Duration, Who)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut plan = Vec::new();
    for (rate, kind) in [(sponsor, 0), (session, 1), (anon, 2)] {
        if rate <= 0.0 {
            continue;
        }
        let mut t = 0.0;
        loop {
            t += -(1.0 - rng.gen::<f64>()).ln() / rate;
            if t >= secs {
                break;
            }
            let who = match kind {
                0 => Who::Sponsor,
                1 => Who::Session,
                _ => Who::Anon(rng.gen_range(0..200)),
            };
            plan.push((Duration::from_secs_f64(t), who));
        }
    }
    plan.sort_by_key(|(at, _)| *at);
    plan
}

/// The same load evenly spaced, anonymous requests taking the 200 addresses in turn: what a
/// test asserts on (a Poisson trace's bursts measure the machine as much as the daemon).
pub fn even(secs: f64, sponsor: f64, session: f64, anon: f64) -> Vec<(Duration, Who)> {
    let mut plan = Vec::new();
    for (rate, kind) in [(sponsor, 0), (session, 1), (anon, 2)] {
        let n = (secs * rate) as u32;
        plan.extend((0..n).map(|i| {
            let who = match kind {
                0 => Who::Sponsor,
                1 => Who::Session,
                _ => Who::Anon((i % 200) as u8),
            };
            (Duration::from_secs_f64(f64::from(i) / rate), who)
        }));
    }
    plan.sort_by_key(|(at, _)| *at);
    plan
}

/// Sends `trace` through `proxy` on schedule, whatever the answers (a task per request).
pub async fn run(
    proxy: SocketAddr,
    key: &str,
    trace: &[(Duration, Who)],
    timeout: Duration,
) -> Vec<Outcome> {
    let start = tokio::time::Instant::now();
    let running: Vec<_> = trace
        .iter()
        .map(|&(at, who)| {
            let key = key.to_string();
            tokio::spawn(async move {
                tokio::time::sleep_until(start + at).await;
                let sent = Instant::now();
                let (status, head, body) = one(proxy, "/page", who, &key, "", timeout).await;
                Outcome {
                    who,
                    status,
                    latency: sent.elapsed(),
                    head,
                    body,
                    at,
                }
            })
        })
        .collect();
    let mut out = Vec::with_capacity(running.len());
    for t in running {
        out.push(t.await.expect("a request task"));
    }
    out
}

/// The share of `who`'s requests answered 200.
pub fn success(out: &[Outcome], who: impl Fn(Who) -> bool) -> f64 {
    let mine: Vec<_> = out.iter().filter(|o| who(o.who)).collect();
    mine.iter().filter(|o| o.status == 200).count() as f64 / mine.len().max(1) as f64
}

/// The `q` quantile (0..=1) of `who`'s latencies, answered or not.
pub fn quantile(out: &[Outcome], who: impl Fn(Who) -> bool, q: f64) -> Duration {
    let mut l: Vec<_> = out
        .iter()
        .filter(|o| who(o.who))
        .map(|o| o.latency)
        .collect();
    if l.is_empty() {
        return Duration::ZERO;
    }
    l.sort();
    l[((l.len() as f64 * q) as usize).min(l.len() - 1)]
}
