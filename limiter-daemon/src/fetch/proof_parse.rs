//! What a fetched proof source's body holds: a range list (the JSON Google, Bing, OpenAI and
//! Apple publish, read by the same parser as `[crawlers] range_files`) or the iptoasn TSV,
//! gzipped as iptoasn serves it (or plain). Bounded: a body and its decompressed text have a
//! size limit, and a list that parses to nothing is refused (a publisher's empty answer is
//! more likely broken than true, and would otherwise unprove every crawler at once).

use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

use ipnet::IpNet;

use crate::config::asn::AsnTable;
use crate::config::crawler_ranges;

/// The most bytes a range list may have (Google's largest is tens of kilobytes).
pub const MAX_RANGE_LIST_BYTES: usize = 4 << 20;
/// The most bytes the (compressed) ASN table may have (iptoasn's is under 10 MB).
pub const MAX_ASN_BYTES: usize = 64 << 20;
/// The most bytes the ASN table may have once decompressed.
pub const MAX_ASN_TEXT_BYTES: u64 = 512 << 20;

/// What a source proves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// A range list; its prefixes prove `crawler`.
    Ranges { crawler: String },
    /// The IP-to-ASN table.
    Asn,
}

impl SourceKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            SourceKind::Ranges { .. } => "ranges",
            SourceKind::Asn => "asn",
        }
    }

    /// The body bound of this kind.
    pub fn max_body(&self) -> usize {
        match self {
            SourceKind::Ranges { .. } => MAX_RANGE_LIST_BYTES,
            SourceKind::Asn => MAX_ASN_BYTES,
        }
    }
}

/// A parsed body.
#[derive(Clone, Debug)]
pub enum Parsed {
    Ranges(Arc<Vec<IpNet>>),
    Asn(Arc<AsnTable>),
}

impl Parsed {
    /// Prefixes, or ASN ranges, held.
    pub fn entries(&self) -> usize {
        match self {
            Parsed::Ranges(n) => n.len(),
            Parsed::Asn(t) => t.len(),
        }
    }
}

/// Parses `body` as `kind` (`url` names it in errors). CPU-bound for the ASN table (half a
/// million lines): call it off the async workers.
pub fn parse(kind: &SourceKind, url: &str, body: &[u8]) -> Result<Parsed, String> {
    let parsed = match kind {
        SourceKind::Ranges { .. } => {
            let text = std::str::from_utf8(body).map_err(|_| "not UTF-8 text".to_string())?;
            let nets = crawler_ranges::parse(Path::new(url), text).map_err(|e| e.to_string())?;
            Parsed::Ranges(Arc::new(nets))
        }
        SourceKind::Asn => {
            let text = if body.starts_with(&[0x1f, 0x8b]) {
                let mut out = String::new();
                flate2::read::GzDecoder::new(body)
                    .take(MAX_ASN_TEXT_BYTES + 1)
                    .read_to_string(&mut out)
                    .map_err(|e| format!("gzip: {e}"))?;
                if out.len() as u64 > MAX_ASN_TEXT_BYTES {
                    return Err(format!("over {MAX_ASN_TEXT_BYTES} bytes decompressed"));
                }
                out
            } else {
                String::from_utf8(body.to_vec()).map_err(|_| "not UTF-8 text".to_string())?
            };
            let table = AsnTable::parse(&text).map_err(|(line, m)| format!("line {line}: {m}"))?;
            Parsed::Asn(Arc::new(table))
        }
    };
    if parsed.entries() == 0 {
        return Err("holds no entries".into());
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    const TSV: &str = "1.0.0.0\t1.0.0.255\t13335\tUS\tCLOUDFLARENET\n";

    #[test]
    fn the_asn_table_parses_gzipped_or_plain_and_a_bad_line_is_named() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(TSV.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        for body in [gz.as_slice(), TSV.as_bytes()] {
            assert_eq!(parse(&SourceKind::Asn, "u", body).unwrap().entries(), 1);
        }
        let err = parse(&SourceKind::Asn, "u", b"1.0.0.0\tbroken\t1\n").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
        let err = parse(&SourceKind::Asn, "u", &gz[..gz.len() / 2]).unwrap_err();
        assert!(err.contains("gzip"), "a truncated download: {err}");
    }

    #[test]
    fn a_range_list_parses_and_an_empty_or_broken_one_is_refused() {
        let k = SourceKind::Ranges {
            crawler: "gptbot".into(),
        };
        let ok = parse(
            &k,
            "u",
            br#"{"prefixes":[{"ipv4Prefix":"20.171.206.0/24"}]}"#,
        )
        .unwrap();
        assert_eq!(ok.entries(), 1);
        assert!(parse(&k, "u", br#"{"prefixes":[]}"#)
            .unwrap_err()
            .contains("no entries"));
        let err = parse(&k, "u", br#"{"prefixes":[{"ipv4Prefix":"0.0.0.0/0"}]}"#).unwrap_err();
        assert!(err.contains("wider than /8"), "a hijacked list: {err}");
        let err = parse(&k, "https://openai.com/gptbot.json", b"{\"prefixes\": [").unwrap_err();
        assert!(err.contains("gptbot.json"), "{err}");
    }
}
