//! The IP-to-ASN table `[networks] asn_table` names, in the iptoasn TSV format
//! (`range_start<TAB>range_end<TAB>AS_number<TAB>country<TAB>description`, IPv4 and IPv6 rows
//! in one file, as `ip2asn-combined.tsv` ships). Loaded with the config, at start and on every
//! reload, into two sorted arrays searched by binary search: no allocation per lookup, and a
//! lookup among 500,000 ranges costs about twenty comparisons.
//!
//! Rows whose AS number is 0 ("Not routed") are left out: an unrouted range has no operator to
//! meter as one. A line that does not parse stops the load with its line number (a truncated
//! download should not silently meter half the Internet per address).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// One range of the table, as found by [`AsnTable::lookup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsnRange {
    pub asn: u32,
    pub start: IpAddr,
    pub end: IpAddr,
}

/// Why a table could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum AsnTableError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: {message}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// The loaded table.
#[derive(Clone, Default)]
pub struct AsnTable {
    v4: Vec<(u32, u32, u32)>,
    v6: Vec<(u128, u128, u32)>,
}

impl std::fmt::Debug for AsnTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AsnTable({} IPv4 ranges, {} IPv6 ranges)",
            self.v4.len(),
            self.v6.len()
        )
    }
}

impl PartialEq for AsnTable {
    fn eq(&self, other: &Self) -> bool {
        self.v4 == other.v4 && self.v6 == other.v6
    }
}

impl AsnTable {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<AsnTable, AsnTableError> {
        let text = std::fs::read_to_string(path).map_err(|source| AsnTableError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        AsnTable::parse(&text).map_err(|(line, message)| AsnTableError::Line {
            path: path.to_path_buf(),
            line,
            message,
        })
    }

    /// Parses the TSV text; an error is `(line number, what is wrong)`.
    pub fn parse(text: &str) -> Result<AsnTable, (usize, String)> {
        let mut t = AsnTable::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut cols = line.split('\t');
            let (Some(a), Some(b), Some(n)) = (cols.next(), cols.next(), cols.next()) else {
                return Err((
                    i + 1,
                    "expected range_start, range_end and AS_number".into(),
                ));
            };
            let start: IpAddr = a
                .parse()
                .map_err(|_| (i + 1, format!("range_start {a:?} is not an address")))?;
            let end: IpAddr = b
                .parse()
                .map_err(|_| (i + 1, format!("range_end {b:?} is not an address")))?;
            let asn: u32 = n
                .trim_start_matches("AS")
                .parse()
                .map_err(|_| (i + 1, format!("AS_number {n:?} is not a number")))?;
            if asn == 0 {
                continue;
            }
            match (start, end) {
                (IpAddr::V4(s), IpAddr::V4(e)) if s <= e => t.v4.push((s.into(), e.into(), asn)),
                (IpAddr::V6(s), IpAddr::V6(e)) if s <= e => t.v6.push((s.into(), e.into(), asn)),
                _ => {
                    return Err((
                        i + 1,
                        format!("{a}..{b} is not a range of one address family"),
                    ))
                }
            }
        }
        // The published file is sorted; sorting anyway makes any file's lookups right.
        t.v4.sort_unstable();
        t.v6.sort_unstable();
        Ok(t)
    }

    /// Ranges held.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every range of `asn`, IPv4 first, in address order: a scan of the whole table (an
    /// operator's call, not a decision's).
    pub fn ranges_of(&self, asn: u32) -> Vec<AsnRange> {
        let v4 = self
            .v4
            .iter()
            .filter(|r| r.2 == asn)
            .map(|&(s, e, asn)| AsnRange {
                asn,
                start: IpAddr::V4(s.into()),
                end: IpAddr::V4(e.into()),
            });
        let v6 = self
            .v6
            .iter()
            .filter(|r| r.2 == asn)
            .map(|&(s, e, asn)| AsnRange {
                asn,
                start: IpAddr::V6(s.into()),
                end: IpAddr::V6(e.into()),
            });
        v4.chain(v6).collect()
    }

    /// The range holding `ip` (IPv4-mapped IPv6 addresses are looked up as IPv4).
    pub fn lookup(&self, ip: IpAddr) -> Option<AsnRange> {
        match ip.to_canonical() {
            IpAddr::V4(v4) => find(&self.v4, u32::from(v4)).map(|(s, e, asn)| AsnRange {
                asn,
                start: IpAddr::V4(s.into()),
                end: IpAddr::V4(e.into()),
            }),
            IpAddr::V6(v6) => find(&self.v6, u128::from(v6)).map(|(s, e, asn)| AsnRange {
                asn,
                start: IpAddr::V6(s.into()),
                end: IpAddr::V6(e.into()),
            }),
        }
    }
}

/// The last range starting at or before `x`, if it reaches `x`.
fn find<T: Ord + Copy>(ranges: &[(T, T, u32)], x: T) -> Option<(T, T, u32)> {
    let i = ranges.partition_point(|r| r.0 <= x);
    let r = *ranges.get(i.checked_sub(1)?)?;
    (x <= r.1).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "1.0.0.0\t1.0.0.255\t13335\tUS\tCLOUDFLARENET\n\
        1.0.1.0\t1.0.3.255\t0\tNone\tNot routed\n\
        1.0.4.0\t1.0.7.255\t38803\tAU\tGTELECOM\n\
        2001:db8::\t2001:db8:ffff:ffff:ffff:ffff:ffff:ffff\t64500\tZZ\tEXAMPLE\n";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn finds_the_range_holding_an_address_and_nothing_between_ranges() {
        let t = AsnTable::parse(SAMPLE).unwrap();
        assert_eq!(t.len(), 3, "the unrouted row is left out");
        assert_eq!(t.lookup(ip("1.0.0.0")).unwrap().asn, 13335);
        assert_eq!(t.lookup(ip("1.0.0.255")).unwrap().asn, 13335);
        assert_eq!(t.lookup(ip("1.0.2.1")), None, "not routed");
        let r = t.lookup(ip("1.0.5.9")).unwrap();
        assert_eq!(
            (r.asn, r.start, r.end),
            (38803, ip("1.0.4.0"), ip("1.0.7.255"))
        );
        assert_eq!(t.lookup(ip("1.0.8.0")), None);
        assert_eq!(t.lookup(ip("0.255.255.255")), None);
        assert_eq!(t.lookup(ip("2001:db8:1::7")).unwrap().asn, 64500);
        assert_eq!(t.lookup(ip("::ffff:1.0.0.9")).unwrap().asn, 13335);
    }

    #[test]
    fn a_bad_line_is_named_by_number() {
        let text = "1.0.0.0\t1.0.0.255\t13335\tUS\tX\n1.0.4.0\tnope\t1\tAU\tY\n";
        let (line, msg) = AsnTable::parse(text).unwrap_err();
        assert_eq!(line, 2);
        assert!(msg.contains("range_end"), "{msg}");
        assert_eq!(AsnTable::parse("1.0.0.0\t::1\t5\n").unwrap_err().0, 1);
        assert_eq!(AsnTable::parse("1.0.0.0\n").unwrap_err().0, 1);
    }
}
