//! `docs/admin-api.md` cannot rot: every `http` example in it is sent, in order, to a real
//! daemon, and the answer must have the status and (at least) the fields of the `response`
//! block that follows it.

use limiter_tests::client::http;
use limiter_tests::daemon::Daemon;
use serde_json::Value;

struct Example {
    line: usize,
    request: String,
    status: u16,
    body: Value,
}

fn blocks(doc: &str) -> Vec<Example> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut pending: Option<(usize, String)> = None;
    while i < lines.len() {
        let lang = lines[i].strip_prefix("```").map(str::trim);
        match lang {
            Some(l @ ("http" | "response")) => {
                let start = i + 1;
                let mut end = start;
                while !lines[end].starts_with("```") {
                    end += 1;
                }
                let text = lines[start..end].join("\n");
                if l == "http" {
                    assert!(
                        pending.is_none(),
                        "line {start}: an http block without a response"
                    );
                    pending = Some((start, text));
                } else {
                    let (line, request) = pending
                        .take()
                        .unwrap_or_else(|| panic!("line {start}: a response without a request"));
                    let (status, body) = text.split_once('\n').unwrap_or((&text, "{}"));
                    out.push(Example {
                        line,
                        request,
                        status: status
                            .trim()
                            .parse()
                            .unwrap_or_else(|_| panic!("line {start}: status {status:?}")),
                        body: serde_json::from_str(body)
                            .unwrap_or_else(|e| panic!("line {start}: {e}")),
                    });
                }
                i = end + 1;
            }
            _ => i += 1,
        }
    }
    assert!(pending.is_none(), "an http block without a response");
    out
}

/// Every field of `want` is in `got` (objects recursively, arrays by their first item).
fn has_fields(want: &Value, got: &Value, at: &str) -> Result<(), String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let gv = g.get(k).ok_or_else(|| format!("{at}.{k} missing"))?;
                if !wv.is_null() && !gv.is_null() {
                    has_fields(wv, gv, &format!("{at}.{k}"))?;
                }
            }
            Ok(())
        }
        (Value::Array(w), Value::Array(g)) => match (w.first(), g.first()) {
            (Some(wf), Some(gf)) => has_fields(wf, gf, &format!("{at}[0]")),
            (Some(_), None) => Err(format!("{at} is empty")),
            _ => Ok(()),
        },
        (Value::Object(_) | Value::Array(_), other) => Err(format!("{at} is {other}")),
        _ => Ok(()),
    }
}

#[test]
fn every_example_in_the_admin_api_doc_runs() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/admin-api.md"))
        .unwrap();
    let examples = blocks(&doc);
    assert!(examples.len() >= 20, "only {} examples", examples.len());
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), "", "");
    let token = d.token();
    let mut key_id = String::new();
    for ex in &examples {
        let text = ex
            .request
            .replace("<token>", &token)
            .replace("{id}", &key_id);
        let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
        let mut lines = head.lines();
        let (method, path) = lines.next().unwrap().split_once(' ').unwrap();
        let headers: Vec<(&str, &str)> = lines
            .map(|l| {
                l.split_once(':')
                    .map(|(k, v)| (k.trim(), v.trim()))
                    .unwrap()
            })
            .collect();
        let body = (!body.is_empty()).then_some(body.as_bytes());
        let r = http(d.admin, method, path, &headers, body);
        assert_eq!(
            r.status, ex.status,
            "example at line {}: {method} {path}: {}",
            ex.line, r.body
        );
        let got = r.json();
        has_fields(&ex.body, &got, "")
            .unwrap_or_else(|e| panic!("example at line {}: {e}: {got}", ex.line));
        if method == "POST" && path == "/admin/v1/keys" && r.status == 201 {
            key_id = got["id"].as_str().unwrap().to_string();
        }
    }
}
