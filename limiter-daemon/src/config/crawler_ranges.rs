//! The range files search engines publish (Google's `googlebot.json`, Bing's `bingbot.json`):
//! `{"creationTime": …, "prefixes": [{"ipv4Prefix": "66.249.64.0/27"}, {"ipv6Prefix": …}]}`.
//! Fields other than `prefixes` and the two prefix keys are ignored (the publishers add some);
//! a prefix that does not parse is an error naming the file and the entry, never skipped.
//! So is a prefix wider than [`WIDEST_V4`] or [`WIDEST_V6`]: no search engine publishes one,
//! and a broken or hijacked list holding `0.0.0.0/0` would make every caller a verified
//! crawler. A refused file or fetched list leaves the last good one in force.
//!
//! Each load records the files' size and modification time as it saw them *before* reading,
//! so a file rewritten while it is read is noticed on the next poll ([`stamps`]).

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use ipnet::IpNet;
use serde::Deserialize;

use crate::model::prefix_set::PrefixSet;

/// The shortest IPv4 prefix a range list may hold (a /8 is 16 million addresses; Google's
/// widest is a /19).
pub const WIDEST_V4: u8 = 8;
/// The shortest IPv6 prefix a range list may hold (a regional registry's allocation size).
pub const WIDEST_V6: u8 = 19;

#[derive(Deserialize)]
struct RawFile {
    prefixes: Vec<RawPrefix>,
}

#[derive(Deserialize)]
struct RawPrefix {
    #[serde(rename = "ipv4Prefix")]
    ipv4: Option<String>,
    #[serde(rename = "ipv6Prefix")]
    ipv6: Option<String>,
}

/// What a file looked like on disk when it was read (`None`: it could not be stat'ed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStamp {
    pub path: PathBuf,
    pub seen: Option<(SystemTime, u64)>,
}

/// The prefixes of every configured file, and the stamps they were read at.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CrawlerRanges {
    pub set: PrefixSet,
    pub stamps: Vec<FileStamp>,
}

impl fmt::Debug for CrawlerRanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Thousands of prefixes say nothing in a config dump; their count does.
        f.debug_struct("CrawlerRanges")
            .field("prefixes", &self.set.len())
            .field("files", &self.stamps.len())
            .finish()
    }
}

impl CrawlerRanges {
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.set.contains(ip)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RangeFileError {
    #[error("cannot read range file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("range file {}, line {line}: {message} (expected {{\"prefixes\": [{{\"ipv4Prefix\": \"…/…\"}}, …]}})", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("range file {}: prefixes[{index}]: {message}", path.display())]
    Prefix {
        path: PathBuf,
        index: usize,
        message: String,
    },
}

/// The stamps `paths` have on disk now.
pub fn stamps(paths: &[PathBuf]) -> Vec<FileStamp> {
    paths.iter().map(|p| stamp(p)).collect()
}

fn stamp(path: &Path) -> FileStamp {
    let seen = std::fs::metadata(path)
        .ok()
        .and_then(|m| Some((m.modified().ok()?, m.len())));
    FileStamp {
        path: path.to_path_buf(),
        seen,
    }
}

/// Reads and parses every file in `paths` into one set.
pub fn load(paths: &[PathBuf]) -> Result<CrawlerRanges, RangeFileError> {
    let mut nets = Vec::new();
    let mut stamps = Vec::with_capacity(paths.len());
    for path in paths {
        stamps.push(stamp(path));
        let text = std::fs::read_to_string(path).map_err(|source| RangeFileError::Read {
            path: path.clone(),
            source,
        })?;
        nets.extend(parse(path, &text)?);
    }
    Ok(CrawlerRanges {
        set: PrefixSet::from_nets(nets),
        stamps,
    })
}

/// The prefixes of one file's `text` (`path` names it in errors).
pub fn parse(path: &Path, text: &str) -> Result<Vec<IpNet>, RangeFileError> {
    let raw: RawFile = serde_json::from_str(text).map_err(|e| RangeFileError::Parse {
        path: path.to_path_buf(),
        line: e.line(),
        message: e.to_string(),
    })?;
    let mut out = Vec::with_capacity(raw.prefixes.len());
    for (index, p) in raw.prefixes.into_iter().enumerate() {
        let bad = |message: String| RangeFileError::Prefix {
            path: path.to_path_buf(),
            index,
            message,
        };
        let net = match (p.ipv4, p.ipv6) {
            (Some(v4), None) => match v4.parse::<IpNet>() {
                Ok(n @ IpNet::V4(_)) => n,
                _ => return Err(bad(format!("ipv4Prefix {v4:?} is not an IPv4 CIDR"))),
            },
            (None, Some(v6)) => match v6.parse::<IpNet>() {
                Ok(n @ IpNet::V6(_)) => n,
                _ => return Err(bad(format!("ipv6Prefix {v6:?} is not an IPv6 CIDR"))),
            },
            (Some(_), Some(_)) => {
                return Err(bad("has both ipv4Prefix and ipv6Prefix".to_string()));
            }
            (None, None) => return Err(bad("has neither ipv4Prefix nor ipv6Prefix".to_string())),
        };
        let widest = match net {
            IpNet::V4(_) => WIDEST_V4,
            IpNet::V6(_) => WIDEST_V6,
        };
        if net.prefix_len() < widest {
            return Err(bad(format!(
                "{net} is wider than /{widest}, the widest prefix a crawler list may hold \
                 (a list holding it would make every such caller a verified crawler)"
            )));
        }
        out.push(net);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOGLE: &str = r#"{
  "creationTime": "2026-11-30T15:46:03.000000",
  "prefixes": [
    {"ipv6Prefix": "2001:4860:4801:10::/64"},
    {"ipv4Prefix": "66.249.64.0/27"},
    {"ipv4Prefix": "66.249.64.32/27", "service": "ignored"}
  ]
}"#;

    #[test]
    fn a_published_file_parses_with_its_extra_fields() {
        let nets = parse(Path::new("g.json"), GOOGLE).unwrap();
        assert_eq!(nets.len(), 3);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("g.json");
        std::fs::write(&f, GOOGLE).unwrap();
        let r = load(std::slice::from_ref(&f)).unwrap();
        assert!(r.contains("66.249.64.40".parse().unwrap()));
        assert!(r.contains("2001:4860:4801:10::1".parse().unwrap()));
        assert!(!r.contains("66.249.64.64".parse().unwrap()));
        assert_eq!(r.stamps, stamps(&[f]), "the stamps are the file as read");
    }

    #[test]
    fn errors_name_the_file_and_the_entry_or_line() {
        let p = Path::new("/etc/limiter/bing.json");
        let err = parse(
            p,
            r#"{"prefixes":[{"ipv4Prefix":"157.55.39.0/24"},{"ipv4Prefix":"157.55.39/24"}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("bing.json")
                && err.contains("prefixes[1]")
                && err.contains("157.55.39/24"),
            "{err}"
        );
        let err = parse(p, r#"{"prefixes":[{"ipv4Prefix":"2001:db8::/32"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an IPv4 CIDR"), "{err}");
        let err = parse(p, "{\n\"prefixes\": [\n{\"ipv4Prefix\": 7}\n]}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 3"), "{err}");
        let err = parse(p, r#"{"prefix": []}"#).unwrap_err().to_string();
        assert!(err.contains("prefixes"), "{err}");
        let err = parse(p, r#"{"prefixes":[{}]}"#).unwrap_err().to_string();
        assert!(err.contains("neither"), "{err}");
        for (wide, entry) in [
            ("0.0.0.0/0", r#"{"ipv4Prefix":"0.0.0.0/0"}"#),
            ("10.0.0.0/7", r#"{"ipv4Prefix":"10.0.0.0/7"}"#),
            ("::/0", r#"{"ipv6Prefix":"::/0"}"#),
            ("2000::/18", r#"{"ipv6Prefix":"2000::/18"}"#),
        ] {
            let text = format!(r#"{{"prefixes":[{{"ipv4Prefix":"66.249.64.0/27"}},{entry}]}}"#);
            let err = parse(p, &text).unwrap_err().to_string();
            assert!(
                err.contains("prefixes[1]") && err.contains(wide) && err.contains("wider"),
                "{wide}: {err}"
            );
        }
        let widest = r#"{"prefixes":[{"ipv4Prefix":"10.0.0.0/8"},{"ipv6Prefix":"2000::/19"}]}"#;
        assert_eq!(
            parse(p, widest).unwrap().len(),
            2,
            "the bounds themselves are allowed"
        );
        let err = load(&[PathBuf::from("/nonexistent/ranges.json")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/ranges.json"), "{err}");
    }
}
