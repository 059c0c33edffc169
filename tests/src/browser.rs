//! A real headless Chromium (Debian's `chromium`) driven over the Chrome DevTools Protocol: a
//! fresh profile per browser, one page, JavaScript evaluated in it, real mouse clicks and
//! keyboard input, screenshots. Missing chromium skips the test, or fails it with `CI=true`.

use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

pub const DEADLINE: Duration = Duration::from_secs(20);
/// Chromium's own start, slower than anything the page does: four browsers starting at once on
/// a loaded 2-core machine took over 20 s to write their DevTools port.
const LAUNCH_DEADLINE: Duration = Duration::from_secs(90);

/// The chromium binary: `LIMITER_CHROMIUM`, else `chromium` on PATH.
fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LIMITER_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    })
}

pub struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    ws: WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _closed = self.ws.close(None);
        // Debian's `chromium` is a shell script that does not exec: the browser and its
        // helpers are its children, all in the process group it leads.
        let group = -libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on the process group this test created.
        unsafe { libc::kill(group, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(5);
        // SAFETY: as above; signal 0 only checks whether any member is left.
        while Instant::now() < end && unsafe { libc::kill(group, 0) } == 0 {
            let _reaped = self.child.try_wait();
            std::thread::park_timeout(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _reaped = self.child.wait();
    }
}

impl Browser {
    /// A headless browser with an empty profile, or `None` (skip) when chromium is missing.
    pub fn launch() -> Option<Browser> {
        Browser::launch_with(&[])
    }

    /// As [`Browser::launch`], the command prefixed by `wrapper` (e.g. `nsenter --net=…`: then
    /// call this from a thread in that namespace, where the DevTools port is).
    pub fn launch_with(wrapper: &[String]) -> Option<Browser> {
        let bin = binary();
        if !crate::require(bin.is_some(), "chromium (apt-get install chromium)") {
            return None;
        }
        let profile = tempfile::tempdir().unwrap();
        let mut cmd = match wrapper.split_first() {
            None => Command::new(bin.unwrap()),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin.unwrap());
                c
            }
        };
        let child = cmd
            .process_group(0)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-crash-reporter",
                "--disable-breakpad",
                "--remote-debugging-port=0",
                "--window-size=1400,1000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        // Chromium writes the port it picked into the profile.
        let port_file = profile.path().join("DevToolsActivePort");
        let port: u16 = poll_for(LAUNCH_DEADLINE, "chromium's DevTools port", || {
            std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
        });
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let ws_url = poll("chromium's page target", || {
            let targets: Value = serde_json::from_str(&get(addr, "/json/list")?).ok()?;
            targets
                .as_array()?
                .iter()
                .find(|t| t["type"] == "page")
                .and_then(|t| t["webSocketDebuggerUrl"].as_str())
                .map(str::to_string)
        });
        let (ws, _) = tungstenite::connect(ws_url.as_str()).expect("DevTools websocket");
        let mut b = Browser {
            child,
            _profile: profile,
            ws,
            next_id: 1,
        };
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": false}),
        );
        Some(b)
    }

    /// One CDP command; events in between are dropped. Panics on a protocol error.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let v = self.request(method, params);
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    /// One CDP command's whole answer (its `result` or its `error`).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::text(msg)).expect("send to chromium");
        loop {
            let m = self.ws.read().expect("read from chromium");
            let Message::Text(text) = m else { continue };
            let v: Value = serde_json::from_str(text.as_str()).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// [`Self::eval`], or `None` while the page is between documents (a navigation or reload
    /// under way destroys the context an evaluation runs in; a poll asks again).
    fn eval_settled(&mut self, expr: &str) -> Option<Value> {
        let v = self.request(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = v.get("error") {
            let message = e["message"].as_str().unwrap_or_default();
            let between = message.contains("navigated or closed")
                || message.contains("context was destroyed")
                || message.contains("Cannot find context");
            assert!(between, "Runtime.evaluate: {v}");
            return None;
        }
        let r = &v["result"];
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        Some(r["result"]["value"].clone())
    }

    /// Polls `expr` until it is truthy (not `null`, `false`, `""` or `0`); returns its value.
    pub fn wait_for(&mut self, what: &str, expr: &str) -> Value {
        poll(what, || {
            let v = self.eval_settled(expr)?;
            let truthy = match &v {
                Value::Null | Value::Bool(false) => false,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            truthy.then_some(v)
        })
    }

    /// A real left click (pressed and released) at the centre of the element `selector`.
    pub fn click(&mut self, selector: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        let rect = self.wait_for(
            &format!("{selector} to be visible"),
            &format!(
                "(() => {{ const e = document.querySelector({sel}); if (!e) return null; \
                 e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
                 return r.width > 0 ? [r.x + r.width / 2, r.y + r.height / 2] : null; }})()"
            ),
        );
        let (x, y) = (rect[0].as_f64().unwrap(), rect[1].as_f64().unwrap());
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Focuses `selector` (by clicking it) and types `text` into it.
    pub fn type_into(&mut self, selector: &str, text: &str) {
        self.click(selector);
        self.call("Input.insertText", json!({"text": text}));
    }

    /// A PNG of the whole page.
    pub fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine as _;
        let r = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap()
    }
}

/// A GET to the DevTools HTTP endpoint, which keeps the connection open: the body is read by
/// its length.
fn get(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nhost: {addr}\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&raw);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if body.len() >= len {
                return Some(body.to_string());
            }
        }
    }
}

fn poll<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    poll_for(DEADLINE, what, f)
}

fn poll_for<T>(deadline: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::park_timeout(Duration::from_millis(50));
    }
}
