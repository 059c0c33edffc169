//! Proofs that refresh themselves, from outside: a local HTTPS server (a test CA made by
//! `openssl` here) serves a published range list (with an `ETag`, answering 304 to a current
//! `If-None-Match`) and the gzipped iptoasn table to the real daemon binary, allowed to fetch
//! from loopback by `[crawlers] allow_private_sources`. The list's source is metered as a
//! crawler and the table turns the ASN level on, without a restart; an update takes effect
//! without a restart; an unchanged list costs a 304; broken JSON and a 500 keep the last good
//! list (counted, logged); `limiterctl crawlers` shows each source; and a restart with the
//! server gone uses the copies on disk.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::body::Bytes;
use limiter_tests::client::http;
use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;

/// What the server serves.
#[derive(Default)]
struct Served {
    /// The range list and its version (the ETag is `"v<version>"`).
    list: Mutex<(Vec<u8>, u64)>,
    asn: Mutex<Vec<u8>>,
    /// 200 while 0, else this status for the range list.
    fail: AtomicU16,
    /// 304s answered for the range list.
    not_modified: AtomicU64,
    /// The `If-None-Match` of each range-list request.
    conditions: Mutex<Vec<Option<String>>>,
}

impl Served {
    fn publish(&self, body: &str) {
        let mut l = self.list.lock().unwrap();
        *l = (body.as_bytes().to_vec(), l.1 + 1);
    }
}

fn list(v4: &str) -> String {
    format!(
        r#"{{"creationTime":"2026-12-01T00:00:00.000000","prefixes":[{{"ipv4Prefix":"{v4}"}}]}}"#
    )
}

fn gzip(text: &str) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap()
}

async fn serve(dir: &Path, served: Arc<Served>) -> SocketAddr {
    limiter_tests::tls::serve_https(dir, "srv", move |req| answer(&served, req)).await
}

fn answer(
    served: &Served,
    req: &http::Request<hyper::body::Incoming>,
) -> http::Response<Full<Bytes>> {
    let r = http::Response::builder();
    let r = match req.uri().path() {
        "/googlebot.json" => {
            let inm = req
                .headers()
                .get("if-none-match")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            served.conditions.lock().unwrap().push(inm.clone());
            let (body, version) = served.list.lock().unwrap().clone();
            let etag = format!("\"v{version}\"");
            match served.fail.load(Ordering::SeqCst) {
                0 if inm.as_deref() == Some(etag.as_str()) => {
                    served.not_modified.fetch_add(1, Ordering::SeqCst);
                    r.status(304)
                        .header("etag", etag)
                        .body(Full::new(Bytes::new()))
                }
                0 => r
                    .header("content-type", "application/json")
                    .header("etag", etag)
                    .body(Full::new(Bytes::from(body))),
                s => r.status(s).body(Full::new(Bytes::from_static(b"oops"))),
            }
        }
        "/ip2asn-combined.tsv.gz" => r
            .header("last-modified", "Tue, 01 Dec 2026 00:00:00 GMT")
            .body(Full::new(Bytes::from(served.asn.lock().unwrap().clone()))),
        _ => r.status(404).body(Full::new(Bytes::new())),
    };
    r.unwrap()
}

fn tier(d: &Daemon, ip: &str) -> String {
    d.decide(ip)["tier"].as_str().unwrap().to_string()
}

/// The value of `series` (name and labels exactly) on the daemon's `/metrics`, 0 when absent.
fn metric(d: &Daemon, series: &str) -> f64 {
    let text = http(d.metrics.unwrap(), "GET", "/metrics", &[], None).body;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[test]
fn range_lists_and_the_asn_table_refresh_without_a_restart_and_survive_a_dead_server() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    limiter_tests::tls::ca(&tls, "ca");
    limiter_tests::tls::leaf(&tls, "ca", "srv", "127.0.0.1", "IP:127.0.0.1");
    let served = Arc::new(Served::default());
    served.publish(&list("66.249.64.0/27"));
    *served.asn.lock().unwrap() = gzip("198.51.100.0\t198.51.100.255\t64500\tZZ\tEXAMPLE-NET\n");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let addr = rt.block_on(serve(&tls, Arc::clone(&served)));
    let list_url = format!("https://{addr}/googlebot.json");
    let asn_url = format!("https://{addr}/ip2asn-combined.tsv.gz");
    let extra = format!(
        "[crawlers]\nrange_urls = [{{ url = \"{list_url}\", crawler = \"googlebot\" }}]\n\
         ca_file = {:?}\nallow_private_sources = [\"127.0.0.1\"]\n\
         [networks]\nasn_url = \"{asn_url}\"\n[networks.asn]\nhourly = 3\n",
        tls.join("ca.pem").display().to_string()
    );
    let env = vec![(
        "LIMITER_TEST_PROOF_REFRESH_MS".to_string(),
        "200".to_string(),
    )];
    let mut d = Daemon::start_store(dir.path(), "", "", &extra, true, Vec::new(), env);

    // The first fetch lands behind the start: the list's source becomes a crawler.
    eventually("the fetched list to prove googlebot", || {
        (tier(&d, "66.249.64.5") == "crawler").then_some(())
    });
    assert_eq!(tier(&d, "66.249.65.5"), "anon");
    // The ASN table is in force: the AS's fourth request is over its hourly 3.
    let mut n = 0;
    let refused = eventually("the fetched ASN table to meter AS64500", || {
        n += 1;
        let v = d.decide(&format!("198.51.100.{n}"));
        (v["action"] == "reject").then_some(v)
    });
    assert_eq!(refused["reason"], "network", "{refused}");
    assert!(
        refused["network"].to_string().contains("64500"),
        "{refused}"
    );

    // An unchanged list costs a 304: the daemon sends the ETag it holds.
    eventually("a 304", || {
        (served.not_modified.load(Ordering::SeqCst) > 0).then_some(())
    });
    assert!(served
        .conditions
        .lock()
        .unwrap()
        .contains(&Some("\"v1\"".to_string())));
    let series = |outcome: &str| {
        format!("limiter_proof_source_fetches_total{{source=\"{list_url}\",outcome=\"{outcome}\"}}")
    };
    eventually("the 304 counted", || {
        (metric(&d, &series("not_modified")) >= 1.0).then_some(())
    });

    // An update takes effect without a restart.
    served.publish(&list("66.249.70.0/27"));
    eventually("the new list in force", || {
        (tier(&d, "66.249.70.5") == "crawler").then_some(())
    });
    assert_eq!(tier(&d, "66.249.64.5"), "anon", "the old ranges are gone");

    // Broken JSON keeps the last good list, and is counted as refused.
    served.publish("{\"prefixes\": [");
    eventually("the broken list refused", || {
        (metric(&d, &series("refused")) >= 1.0).then_some(())
    });
    assert_eq!(
        tier(&d, "66.249.70.5"),
        "crawler",
        "the last good list stays"
    );
    // So does a 500 (counted as failed, logged), and the age of the list in force grows.
    let age = format!("limiter_proof_source_age_seconds{{source=\"{list_url}\"}}");
    served.fail.store(500, Ordering::SeqCst);
    eventually("the 500 counted", || {
        (metric(&d, &series("failed")) >= 1.0).then_some(())
    });
    let failing_since = metric(&d, &age);
    assert!(failing_since > 0.0, "{age} is exported");
    eventually("the age to grow while fetches fail", || {
        (metric(&d, &age) > failing_since + 0.5).then_some(())
    });
    assert_eq!(
        tier(&d, "66.249.70.5"),
        "crawler",
        "the last good list stays"
    );
    assert!(d.logs().contains("proof_source_failed"), "{}", d.logs());
    // A config reload keeps the fetched list (it is no part of the file).
    let r = d.admin("POST", "/admin/v1/reload", Some(&serde_json::json!({})));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(tier(&d, "66.249.70.5"), "crawler", "kept across a reload");
    assert_eq!(
        metric(
            &d,
            &format!("limiter_proof_source_entries{{source=\"{list_url}\"}}")
        ),
        1.0
    );

    // limiterctl shows each source: what it proves, its entries, last outcome, errors.
    let (code, out, err) = d.ctl(&["crawlers"]);
    assert_eq!(code, 0, "{out}{err}");
    let row = |url: &str| {
        out.lines()
            .find(|l| l.starts_with(url))
            .unwrap_or_else(|| panic!("no row for {url}:\n{out}"))
            .to_string()
    };
    let list_row = row(&list_url);
    assert!(
        list_row.contains("googlebot") && list_row.contains("failed"),
        "{out}"
    );
    assert!(
        out.contains("status 500"),
        "the last error is shown:\n{out}"
    );
    let asn_row = row(&asn_url);
    assert!(asn_row.contains("asn") && asn_row.contains(" 1 "), "{out}");
    let (code, json, _) = d.ctl(&["crawlers", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let src = &v["sources"][0];
    assert_eq!(src["crawler"], "googlebot", "{v}");
    assert!(src["errors"].as_u64().unwrap() >= 2, "{v}");
    assert_eq!(src["lastOutcome"], "failed", "{v}");

    // A restart with the server gone: the copies on disk are in force from the start.
    d.stop();
    drop(rt);
    d.spawn();
    assert_eq!(tier(&d, "66.249.70.5"), "crawler", "the list on disk");
    assert_eq!(tier(&d, "66.249.64.5"), "anon");
    let mut n = 0;
    let refused = eventually("the ASN table on disk to meter AS64500", || {
        n += 1;
        let v = d.decide(&format!("198.51.100.{}", 100 + n));
        (v["action"] == "reject").then_some(v)
    });
    assert_eq!(refused["reason"], "network", "{refused}");
    let v = eventually("the failed fetch after the restart", || {
        let v = d.admin("GET", "/admin/v1/crawlers", None).json();
        (v["sources"][0]["lastOutcome"] == "failed").then_some(v)
    });
    assert_eq!(v["sources"][0]["fromDisk"], true, "{v}");
    assert_eq!(v["sources"][0]["entries"], 1, "{v}");
    assert_eq!(v["sources"][1]["fromDisk"], true, "{v}");
}
