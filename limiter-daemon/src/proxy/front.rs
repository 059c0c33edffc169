//! The proxy's client side: each accepted connection starts here. The request crawlers send
//! most, a bodyless GET, HEAD or OPTIONS from an HTTP/1.1 client, is served by this module's own
//! loop: the head is parsed in place (httparse), decided on, and forwarded on the upstream's
//! direct path with its fields copied as they came; the upstream's head is rewritten straight
//! into the client's response. Anything else (a body, `Expect`, `Upgrade`, HTTP/1.0, a
//! `Connection` field naming other fields, an absolute-form target) hands the connection, with
//! the bytes already read, to hyper's server for the rest of its life.
//!
//! Why: with hyper's server on every request, its dispatcher, the header maps built for the
//! request and the response, and a header-read timer armed per request were about a quarter of
//! the proxy's user time (profile and figures in docs/http.md). Here no map holds more than
//! the fields the decision reads, and the header-read deadline is one timer per connection,
//! re-armed only when it fires early.
//!
//! What the client sees is what hyper's path gives: hop-by-hop fields stripped both ways,
//! `X-Forwarded-For` appended, the rate-limit fields replacing any of the upstream's, `Date`
//! added when the upstream sent none, chunked framing when the upstream's length is unknown,
//! `431` over the head limits, `400` for a malformed head, no body after HEAD.

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Response};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::edge::h1::write::write_answer;
use crate::edge::limits::{too_large, HeaderLimitError};
use crate::edge::listen::rewind::Rewind;
use crate::engine::decider::RequestView;
use crate::identity::client_ip::Client;
use crate::proxy::access;
use crate::proxy::forward::forward;
use crate::proxy::h2::{count_stream, H2Counters, PREFACE};
use crate::proxy::h2_deadline::{Deadlines, Tracked, Verdict};
use crate::proxy::h2_watch::{abuse, FrameWatch};
use crate::proxy::held;
use crate::proxy::hyper::{admit, handle, Admission, ProxyState};
use crate::proxy::inspect::{inspect, Inspected, Scope, MAX_FIELDS};
use crate::proxy::request_rules;

/// Read-buffer growth per read.
const READ_SIZE: usize = 8 * 1024;
/// Bytes of request line allowed on top of the header-bytes limit before a head that is still
/// incomplete is refused.
const REQUEST_LINE_ROOM: usize = 8 * 1024;
/// How long an idle HTTP/2 connection told GOAWAY has to close before it is dropped: its
/// client acknowledges the server's PING that comes with the GOAWAY, then h2 closes.
const GOAWAY_GRACE: Duration = Duration::from_secs(1);
/// Output buffer kept between requests; a larger one (after a big body) is given back, so
/// thousands of idle keep-alive connections do not each hold a flush's worth.
const OUT_KEPT: usize = 8 * 1024;

/// What every connection of one proxy thread shares.
pub(crate) struct Front {
    pub(crate) state: Arc<ProxyState>,
    /// Serves connections handed over (see the module docs).
    /// HTTP/1.1, and HTTP/2 unless `[http] http2 = false` (see [`crate::proxy::h2`]).
    pub(crate) hyper: hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    pub(crate) header_read_timeout: Duration,
    /// Cancelled at shutdown: idle connections close, busy ones after their current request.
    pub(crate) stop: CancellationToken,
}

impl Front {
    /// Whether this module's loop may serve requests (else every connection goes to hyper):
    /// always, unless the head limits allow more fields than it parses.
    fn loop_enabled(&self) -> bool {
        self.state.limits.max_count < MAX_FIELDS
    }
}

/// Serves one accepted connection until it closes.
pub(crate) async fn serve(front: Arc<Front>, mut stream: TcpStream, peer: SocketAddr) {
    let mut buf = BytesMut::new();
    let mut decided = None;
    if front.loop_enabled() {
        match serve_loop(&front, &mut stream, &mut buf, peer.ip()).await {
            After::Close => return,
            After::HandOver => {
                match held::decide_before_hyper(&front.state, &mut stream, &mut buf, peer.ip())
                    .await
                {
                    Some(d) => decided = d,
                    None => return,
                }
            }
        }
    }
    // Boxed: hyper's connection is large, and inline it would size every connection's future,
    // held ones included.
    Box::pin(hand_over(
        &front,
        stream,
        buf.freeze(),
        peer.ip(),
        decided,
        false,
    ))
    .await;
}

/// How [`serve_loop`] ended.
enum After {
    Close,
    /// A request this loop does not serve is at the front of the buffer.
    HandOver,
}

async fn serve_loop(
    front: &Front,
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    peer: IpAddr,
) -> After {
    let timeout = front.header_read_timeout;
    let mut timer = pin!(tokio::time::sleep(timeout));
    let mut stopped = pin!(front.stop.cancelled());
    let head_cap = front.state.limits.max_bytes + REQUEST_LINE_ROOM;
    // Reused across the connection's requests.
    let mut up = Vec::with_capacity(512);
    let mut out = Vec::with_capacity(4096);
    loop {
        let since = Instant::now();
        let plan = loop {
            if !buf.is_empty() && buf.len() < PREFACE.len() && PREFACE.starts_with(buf) {
                // Maybe HTTP/2 with prior knowledge: wait for the whole preface.
            } else if buf.starts_with(PREFACE) {
                return After::HandOver;
            } else if !buf.is_empty() {
                let inspected = inspect(
                    buf,
                    &Scope {
                        limits: front.state.limits,
                        decider: &*front.state.steps.decider,
                        peer,
                    },
                    &mut up,
                );
                match inspected {
                    Inspected::Serve(plan) => break plan,
                    Inspected::HandOver => return After::HandOver,
                    Inspected::Refuse(resp) => {
                        access::refused(&front.state, peer, buf, &resp);
                        return refuse(stream, &resp, &mut out).await;
                    }
                    Inspected::Partial if buf.len() > head_cap => {
                        let resp = if buf.contains(&b'\n') {
                            too_large(HeaderLimitError::Bytes {
                                bytes: buf.len(),
                                max: front.state.limits.max_bytes,
                            })
                        } else {
                            // Not even the request line has ended: its target is too long.
                            request_rules::target_too_long(buf.len())
                        };
                        access::refused(&front.state, peer, buf, &resp);
                        return refuse(stream, &resp, &mut out).await;
                    }
                    Inspected::Partial => {}
                }
            }
            buf.reserve(READ_SIZE);
            tokio::select! {
                biased;
                read = std::future::poll_fn(|cx| {
                    tokio_util::io::poll_read_buf(Pin::new(&mut *stream), cx, &mut *buf)
                }) => match read {
                    Ok(0) | Err(_) => return After::Close,
                    Ok(_) => {}
                },
                () = &mut timer => {
                    // One timer per connection: it fires at most once per timeout period and is
                    // moved to this head's deadline when that is still ahead.
                    let due = since + timeout;
                    if Instant::now() >= due {
                        tracing::debug!(%peer, "request head not received within the header read timeout");
                        return After::Close;
                    }
                    timer.as_mut().reset(due);
                },
                () = &mut stopped, if buf.is_empty() => return After::Close,
            }
        };
        let head_only = plan.method == Method::HEAD;
        out.clear();
        let view = RequestView {
            client: front.state.steps.resolve(peer, &plan.fields),
            method: &plan.method,
            path: plan.path(buf),
            headers: &plan.fields,
        };
        let mut line = access::start_head(&front.state, peer, &view, &buf[..plan.len]);
        let admission = admit(&front.state, &view).await;
        access::admitted(&mut line, &admission);
        // Only `up` is needed from here on.
        buf.advance(plan.len);
        let decision = match admission {
            Admission::Answer(resp) => {
                access::answered(&front.state, line.take(), &resp, head_only);
                write_answer(&mut out, &resp, head_only, plan.close);
                if stream.write_all(&out).await.is_err() {
                    return After::Close;
                }
                None
            }
            Admission::Hold(decision, permit) => {
                // Held requests wait long and by the thousand: the wait keeps the upstream head
                // and the bytes read past this request, nothing more.
                *buf = if buf.is_empty() {
                    BytesMut::new()
                } else {
                    BytesMut::from(&buf[..])
                };
                out = Vec::new();
                up.shrink_to_fit();
                match held::wait(&front.state, stream, decision, permit, head_only).await {
                    held::Waited::Forward(d, slot) => Some((d, slot)),
                    held::Waited::Closed => return After::Close,
                }
            }
            Admission::Forward(decision, slot) => Some((decision, slot)),
        };
        // By reference: a moved-out copy would size every connection's future. The slot at
        // the upstream is freed with `decision`, once the exchange is over.
        let kept = match &decision {
            Some((d, _)) => {
                let sent = forward(
                    &front.state.upstream,
                    stream,
                    &up,
                    d,
                    head_only,
                    plan.close,
                    &mut out,
                )
                .await;
                (front.state.steps.access_log).finish(line, sent.status, sent.bytes);
                sent.kept
            }
            None => true,
        };
        if out.capacity() > OUT_KEPT {
            out = Vec::with_capacity(OUT_KEPT / 2);
        }
        if !kept || plan.close || front.stop.is_cancelled() {
            return After::Close;
        }
    }
}

/// Writes `resp` with `Connection: close` and ends the connection.
async fn refuse(stream: &mut TcpStream, resp: &Response<Bytes>, out: &mut Vec<u8>) -> After {
    out.clear();
    write_answer(out, resp, false, true);
    let _ = stream.write_all(out).await;
    let _ = stream.shutdown().await;
    After::Close
}

/// Serves the rest of the connection with hyper, `read` (what the loop had read) first.
/// `decided`: what [`held::decide_before_hyper`] made of the first request. `https`: the
/// connection came over TLS (`X-Forwarded-Proto: https` upstream).
///
/// HTTP/2 connections are timed here (hyper's h2 server has no header or idle timer): see
/// [`crate::proxy::h2_deadline`]. An idle one gets GOAWAY and [`GOAWAY_GRACE`] to
/// close; one stuck in a header block is closed at once.
pub(crate) async fn hand_over<S>(
    front: &Arc<Front>,
    mut stream: S,
    read: Bytes,
    peer: IpAddr,
    decided: Option<(Client, Admission)>,
    https: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let deadlines = Arc::new(Deadlines::new(Instant::now(), front.header_read_timeout));
    let read = if read.is_empty() {
        // The server tells HTTP/2 from HTTP/1.1 by the first bytes and has no timer while it
        // waits for them: a silent client is cut off here, as hyper's header timer would.
        let mut first = BytesMut::with_capacity(READ_SIZE);
        tokio::select! {
            got = tokio::time::timeout_at(deadlines.first(), stream.read_buf(&mut first)) => {
                match got {
                    Ok(Ok(n)) if n > 0 => first.freeze(),
                    _ => return,
                }
            }
            () = front.stop.cancelled() => return,
        }
    } else {
        read
    };
    let state = Arc::clone(&front.state);
    let decided = parking_lot::Mutex::new(decided);
    let streams = Arc::clone(&deadlines);
    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let state = Arc::clone(&state);
        let decided = decided.lock().take();
        let h2 = req.version() == http::Version::HTTP_2;
        count_stream(&state.h2, h2);
        let open = h2.then(|| streams.open());
        let (client, decided) = match decided {
            Some((client, admission)) => (client, Some(admission)),
            None => (state.steps.resolve(peer, req.headers()), None),
        };
        let line = access::start_request(&state, (peer, client), &req);
        async move {
            let resp = handle(&state, (peer, client), req, decided, https).await;
            let resp = access::logged(&state, line, resp);
            Ok::<_, Infallible>(resp.map(|body| Tracked::new(body, open)))
        }
    });
    let flooded = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(Watched {
        stream: Rewind::new(read, stream),
        watch: FrameWatch::default(),
        flooded: Arc::clone(&flooded),
        counters: Arc::clone(&front.state.h2),
        deadlines: Arc::clone(&deadlines),
    });
    let mut conn = pin!(front.hyper.serve_connection_with_upgrades(io, svc));
    let mut timer = pin!(tokio::time::sleep_until(deadlines.first()));
    let (mut timed, mut going_away, mut stopping) = (true, false, false);
    let ended = loop {
        tokio::select! {
            ended = conn.as_mut() => break ended,
            () = front.stop.cancelled(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            () = &mut timer, if timed => match deadlines.verdict(Instant::now()) {
                Verdict::Until(at) => timer.as_mut().reset(at),
                Verdict::Off => timed = false,
                Verdict::HeadersLate => {
                    tracing::debug!(%peer, "HTTP/2 header block not finished within the header read timeout");
                    return;
                }
                Verdict::Idle if going_away => {
                    tracing::debug!(%peer, "idle HTTP/2 connection did not close after GOAWAY");
                    return;
                }
                Verdict::Idle => {
                    tracing::debug!(%peer, "HTTP/2 connection idle for the header read timeout");
                    going_away = true;
                    conn.as_mut().graceful_shutdown();
                    timer.as_mut().reset(Instant::now() + GOAWAY_GRACE);
                }
            },
        }
    };
    if let Err(err) = &ended {
        tracing::debug!(error = %err, "proxy connection ended with an error");
    }
    let err = ended
        .as_ref()
        .err()
        .map(|e| &**e as &(dyn std::error::Error + 'static));
    if let Some(why) = abuse(flooded.load(Ordering::Relaxed), err) {
        front.state.h2.abuse_closes.fetch_add(1, Ordering::Relaxed);
        tracing::info!(%peer, reason = why, "HTTP/2 connection closed for abuse");
        // A strike may wait on the store: not on this thread.
        let decider = Arc::clone(&front.state.steps.decider);
        tokio::task::spawn_blocking(move || decider.abuse_strike(peer, why));
    }
}

/// A connection handed over ([`Rewind`]) whose reads are followed by a [`FrameWatch`]
/// (HTTP/2 resets counted, header blocks timed, floods cut off: the read fails, and hyper
/// drops the connection), what is written to it counted (it earns the client WINDOW_UPDATEs).
struct Watched<S> {
    stream: Rewind<S>,
    watch: FrameWatch,
    counters: Arc<H2Counters>,
    /// Set when the watch cut the connection off for a flood.
    flooded: Arc<AtomicBool>,
    deadlines: Arc<Deadlines>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.stream).poll_read(cx, buf))?;
        let watched = this
            .watch
            .feed(&buf.filled()[before..], &this.counters, &this.deadlines);
        if watched.is_err() {
            this.flooded.store(true, Ordering::Relaxed);
        }
        Poll::Ready(watched.map_err(io::Error::other))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let wrote = Pin::new(&mut this.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = wrote {
            this.watch.wrote(n);
        }
        wrote
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let wrote = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = wrote {
            this.watch.wrote(n);
        }
        wrote
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::limits::HeaderLimits;
    use crate::engine::decider::Decider;
    use crate::model::Decision;
    use crate::proxy::forward::response_head;
    use crate::proxy::inspect::Plan;

    /// Reads only `cookie`, like the engine with no key header or trusted proxy.
    struct CookieOnly;

    impl Decider for CookieOnly {
        fn decide(&self, _: &RequestView<'_>) -> Decision {
            unreachable!("inspect never decides")
        }

        fn reads_header(&self, name: &[u8]) -> bool {
            name.eq_ignore_ascii_case(b"cookie")
        }
    }

    fn run(wire: &str) -> (Inspected, String) {
        let cx = Scope {
            limits: HeaderLimits {
                max_count: 8,
                max_bytes: 200,
            },
            decider: &CookieOnly,
            peer: "198.51.100.7".parse().unwrap(),
        };
        let mut up = Vec::new();
        let got = inspect(wire.as_bytes(), &cx, &mut up);
        (got, String::from_utf8(up).unwrap())
    }

    #[test]
    fn served_requests_go_upstream_with_hop_fields_stripped_and_forwarded_for_folded() {
        let wire = "GET /a/b?q=1 HTTP/1.1\r\nHost: site\r\nCookie: s=1\r\nTE: trailers\r\n\
                    X-Forwarded-For: 203.0.113.1\r\nConnection: keep-alive\r\n\
                    Proxy-Authorization: x\r\nx-forwarded-for: 10.0.0.1\r\nAccept: */*\r\n\r\nNEXT";
        let (got, up) = run(wire);
        let Inspected::Serve(plan) = got else {
            panic!("{got:?}")
        };
        assert_eq!(plan.len, wire.len() - "NEXT".len());
        assert_eq!(plan.method, Method::GET);
        assert_eq!(plan.path(wire.as_bytes()), "/a/b");
        assert!(!plan.close);
        // Only what the decider reads is in the view's map, and `Accept` (a refusal's format).
        assert_eq!(plan.fields.len(), 2);
        assert_eq!(plan.fields["cookie"], "s=1");
        assert_eq!(plan.fields["accept"], "*/*");
        assert_eq!(
            up,
            "GET /a/b?q=1 HTTP/1.1\r\nHost: site\r\nCookie: s=1\r\nAccept: */*\r\n\
             x-forwarded-for: 203.0.113.1, 10.0.0.1, 198.51.100.7\r\n\r\n"
        );
        let (got, up) = run("HEAD / HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n");
        assert!(matches!(got, Inspected::Serve(Plan { close: true, .. })));
        assert_eq!(
            up,
            "HEAD / HTTP/1.1\r\nhost: h\r\nx-forwarded-for: 198.51.100.7\r\n\r\n"
        );
    }

    #[test]
    fn anything_but_a_bodyless_http11_request_is_handed_over() {
        for wire in [
            "POST / HTTP/1.1\r\ncontent-length: 1\r\n\r\nx",
            "GET / HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
            "GET / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n",
            "GET http://site/ HTTP/1.1\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
            "GET / HTTP/1.1\r\nexpect: 100-continue\r\n\r\n",
            "GET / HTTP/1.1\r\nconnection: x-private\r\n\r\n",
            "DELETE / HTTP/1.1\r\n\r\n",
        ] {
            let (got, _) = run(wire);
            assert!(matches!(got, Inspected::HandOver), "{wire:?}: {got:?}");
        }
    }

    #[test]
    fn partial_malformed_and_oversized_heads() {
        assert!(matches!(
            run("GET / HTTP/1.1\r\nhost: a\r\n").0,
            Inspected::Partial
        ));
        let status = |wire: &str| match run(wire).0 {
            Inspected::Refuse(resp) => resp.status().as_u16(),
            other => panic!("{wire:?}: {other:?}"),
        };
        assert_eq!(status("GET / HTTP/1.1\r\nbad header\r\n\r\n"), 400);
        assert_eq!(status("G\x01T / HTTP/1.1\r\n\r\n"), 400);
        let nine: String = (0..9).map(|i| format!("x-{i}: v\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\n{nine}\r\n")), 431);
        let flood: String = (0..200).map(|i| format!("x-{i}: v\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\n{flood}\r\n")), 431);
        let big = "v".repeat(300);
        assert_eq!(status(&format!("GET / HTTP/1.1\r\nx: {big}\r\n\r\n")), 431);
        // RFC 9112 §3.2: exactly one Host on HTTP/1.1.
        assert_eq!(status("GET / HTTP/1.1\r\naccept: */*\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nhost: a\r\nHost: b\r\n\r\n"), 400);
        let long = "a".repeat(request_rules::MAX_TARGET_BYTES);
        assert_eq!(
            status(&format!("GET /{long} HTTP/1.1\r\nhost: a\r\n\r\n")),
            414
        );
    }

    /// Every connection's task is as large as its future's largest state, so a held request
    /// pays for the forwarding path's state too: the rare, large parts are boxed.
    #[tokio::test]
    async fn connection_futures_stay_small() {
        use crate::config::http::HttpSettings;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let settings = HttpSettings::default();
        let state = Arc::new(ProxyState {
            steps: crate::edge::steps::Steps {
                decider: Arc::new(CookieOnly),
                gate: crate::edge::steps::hold::HoldGate::new(1, 1),
                hints: crate::edge::render::response::Hints::default(),
                grace_over: CancellationToken::new(),
                access_log: Default::default(),
                overload: None,
            },
            upstream: crate::proxy::upstream::client::Upstream::new(
                "127.0.0.1:9".parse().unwrap(),
                &settings,
                Arc::default(),
            ),
            limits: HeaderLimits {
                max_count: 64,
                max_bytes: 4096,
            },
            self_service: None,
            tunnels: crate::proxy::tunnel::registry::Tunnels::new(1, 1),
            tunnel_idle: Duration::from_secs(1),
            h2: Arc::default(),
        });
        let hyper = crate::proxy::h2::server_builder(&settings, state.limits);
        let front = Arc::new(Front {
            state,
            hyper,
            header_read_timeout: Duration::from_secs(1),
            stop: CancellationToken::new(),
        });
        let conn = serve(front, stream, "127.0.0.1:1".parse().unwrap());
        let size = std::mem::size_of_val(&conn);
        // 2,736 bytes when written; a held request's whole cost is to stay under 8 KiB.
        assert!(size <= 3072, "a connection's future is {size} bytes");
    }

    fn allowed() -> Decision {
        use crate::model::{WindowKind, WindowState};
        Decision::builder(crate::model::Tier::Anon, "ip:x")
            .window(WindowState {
                kind: WindowKind::Hourly,
                limit: 600,
                remaining: 599,
                window_secs: 3600,
                reset_secs: 100,
            })
            .warn_remaining(3)
            .cost(1)
            .build()
    }

    /// Byte strings near a request head: valid heads with bytes flipped, cut or inserted.
    fn near_request() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let base = b"GET /a?b=1 HTTP/1.1\r\nHost: h\r\nCookie: s=1\r\nX-Forwarded-For: 1.2.3.4\r\n\
                     Connection: keep-alive, close\r\n\r\n"
            .to_vec();
        (
            proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            proptest::option::of(any::<usize>()),
        )
            .prop_map(move |(edits, cut)| {
                let mut b = base.clone();
                for (at, byte) in edits {
                    let i = at % b.len();
                    b[i] = byte;
                }
                if let Some(cut) = cut {
                    b.truncate(cut % (b.len() + 1));
                }
                b
            })
    }

    proptest::proptest! {
        /// Whatever the bytes, inspection answers (never panics), and a head it serves goes
        /// upstream as a complete, parseable request whose last field is this client's hop.
        #[test]
        fn inspection_never_panics_and_serves_only_well_formed_heads(
            wire in proptest::prop_oneof![
                near_request(),
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            ]
        ) {
            let cx = Scope {
                limits: HeaderLimits { max_count: 64, max_bytes: 4096 },
                decider: &CookieOnly,
                peer: "198.51.100.7".parse().unwrap(),
                };
            let mut up = Vec::new();
            if let Inspected::Serve(plan) = inspect(&wire, &cx, &mut up) {
                proptest::prop_assert!(plan.len <= wire.len());
                let mut fields = [httparse::EMPTY_HEADER; 80];
                let mut req = httparse::Request::new(&mut fields);
                let parsed = req.parse(&up);
                proptest::prop_assert_eq!(parsed, Ok(httparse::Status::Complete(up.len())));
                let last = req.headers.last().unwrap();
                proptest::prop_assert!(last.name.eq_ignore_ascii_case("x-forwarded-for"));
                proptest::prop_assert!(last.value.ends_with(b"198.51.100.7"));
            }
        }

        /// Whatever the upstream sends, the response head is an error, a wait, or a complete
        /// client head; never a panic.
        #[test]
        fn response_heads_never_panic(
            wire in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            prefix in proptest::prop_oneof![
                proptest::strategy::Just(&b""[..]),
                proptest::strategy::Just(&b"HTTP/1.1 200 OK\r\n"[..]),
                proptest::strategy::Just(&b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No\r\n"[..]),
            ],
            head_only in proptest::prelude::any::<bool>(),
        ) {
            let mut ubuf = BytesMut::from(prefix);
            ubuf.extend_from_slice(&wire);
            let mut out = Vec::new();
            let d = allowed();
            if let Ok(Some(_)) = response_head(&mut ubuf, head_only, &d, false, &mut out) {
                proptest::prop_assert!(out.ends_with(b"\r\n\r\n"));
                let mut fields = [httparse::EMPTY_HEADER; 160];
                let mut resp = httparse::Response::new(&mut fields);
                proptest::prop_assert_eq!(resp.parse(&out), Ok(httparse::Status::Complete(out.len())));
            }
        }
    }
}
