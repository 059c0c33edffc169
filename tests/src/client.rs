//! The plain blocking HTTP/1.1 client of the tests: one request on its own connection
//! (`Connection: close`), read to the end, a chunked body decoded. Enough for the daemon's
//! listeners (API, admin, metrics, proxy) when a test needs a status, fields and a body.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// One answer: status, fields (lower-case names, in order), body.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    /// The first field named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// [`Resp::header`], which must be there.
    pub fn field(&self, name: &str) -> &str {
        self.header(name)
            .unwrap_or_else(|| panic!("field {name} missing in {:?}", self.headers))
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// One request; `None` when the connection fails or the answer has no status line.
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Option<Resp> {
    try_http_from(None, addr, method, path, headers, body)
}

/// [`try_http`] from the local address `from` (a loopback address other than 127.0.0.1 is
/// another client to the daemon). `Host` is `addr` unless `headers` name one.
pub fn try_http_from(
    from: Option<IpAddr>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Option<Resp> {
    let mut s = connect(from, addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nconnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut raw = Vec::new();
    // A reset after the answer (the server closing with unread input) keeps what was read.
    let _ = s.read_to_end(&mut raw);
    parse(&raw)
}

/// [`try_http`], panicking when there is no answer.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Resp {
    try_http(addr, method, path, headers, body)
        .unwrap_or_else(|| panic!("{method} {path} on {addr}: no answer"))
}

/// A request with a JSON body (`Content-Type: application/json` when there is one), `Host:
/// test` unless `headers` name one (what signed requests sign as `@authority`).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let mut all = headers.to_vec();
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        all.push(("host", "test"));
    }
    if !body.is_empty() || method == "POST" {
        all.push(("content-type", "application/json"));
    }
    http(addr, method, path, &all, Some(body.as_bytes()))
}

/// `(status, body)` of a JSON request, `None` when the listener does not answer (yet).
pub fn exchange(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let headers = [("content-type", "application/json")];
    try_http(addr, method, path, &headers, Some(body.as_bytes())).map(|r| (r.status, r.body))
}

/// `POST /v1/decide` for a GET of `path` from `ip`, with the API token `auth` if any.
pub fn decide(api: SocketAddr, ip: &str, path: &str, auth: Option<&str>) -> Resp {
    let body = format!("{{\"ip\":\"{ip}\",\"method\":\"GET\",\"path\":\"{path}\"}}");
    let bearer = auth.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("authorization", b.as_str()))
        .collect();
    request(api, "POST", "/v1/decide", &headers, &body)
}

/// The `/metrics` text.
pub fn metrics(addr: SocketAddr) -> String {
    request(addr, "GET", "/metrics", &[], "").body
}

fn connect(from: Option<IpAddr>, to: SocketAddr) -> Option<TcpStream> {
    let Some(from) = from else {
        return TcpStream::connect_timeout(&to, Duration::from_secs(5)).ok();
    };
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(to),
        socket2::Type::STREAM,
        None,
    )
    .ok()?;
    sock.bind(&SocketAddr::new(from, 0).into()).ok()?;
    sock.connect_timeout(&to.into(), Duration::from_secs(5))
        .ok()?;
    Some(sock.into())
}

fn parse(raw: &[u8]) -> Option<Resp> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some(Resp {
        status,
        headers,
        body,
    })
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `"burst";r=9;t=60, …` (the `RateLimit` field) as (name, r, t).
pub fn ratelimit_field(v: &str) -> Vec<(String, u64, u64)> {
    v.split(", ")
        .filter(|s| !s.is_empty())
        .map(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap().trim_matches('"').to_string();
            let mut r = 0;
            let mut t = 0;
            for p in parts {
                if let Some(x) = p.strip_prefix("r=") {
                    r = x.parse().unwrap();
                } else if let Some(x) = p.strip_prefix("t=") {
                    t = x.parse().unwrap();
                }
            }
            (name, r, t)
        })
        .collect()
}
