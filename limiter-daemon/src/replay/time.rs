//! Timestamps of access logs, to and from milliseconds since the Unix epoch, without a date
//! library: nginx/Apache `$time_local` (`10/Oct/2000:13:55:36 -0700`), ISO 8601 / RFC 3339
//! (`2000-10-10T13:55:36.120+02:00`, nginx `$time_iso8601`), and epoch seconds (nginx
//! `$msec`, `1714564800.123`). Every line of a log carries one, so this is on the hot path:
//! fixed-position digits and one calendar formula, no allocation.

/// Days from 1970-01-01 to `y-m-d` (proleptic Gregorian; Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `(y, m, d)` of a day count from 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// The decimal number in `b` (all digits, at most 9 of them).
fn digits(b: &[u8]) -> Option<u32> {
    if b.is_empty() || b.len() > 9 {
        return None;
    }
    b.iter().try_fold(0u32, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
    })
}

/// Milliseconds since the epoch of a UTC civil time shifted by `offset_secs` east of UTC;
/// `None` when a field is out of range or the instant is before 1970.
fn to_ms(date: [u32; 3], time: [u32; 4], offset_secs: i64) -> Option<u64> {
    let ([y, mo, d], [h, mi, s, ms]) = (date, time);
    let y = i64::from(y);
    // 60 seconds: a leap second, as logs write it; it folds into the next second.
    if !(1970..=9999).contains(&y)
        || !(1..=12).contains(&mo)
        || d == 0
        || d > days_in_month(y, mo)
        || h > 23
        || mi > 59
        || s > 60
    {
        return None;
    }
    let secs = days_from_civil(y, mo, d) * 86_400
        + i64::from(h) * 3600
        + i64::from(mi) * 60
        + i64::from(s)
        - offset_secs;
    u64::try_from(secs)
        .ok()?
        .checked_mul(1000)?
        .checked_add(u64::from(ms))
}

/// `+hhmm`, `-hh:mm`, `Z` as seconds east of UTC.
fn offset(b: &[u8]) -> Option<i64> {
    if b == b"Z" || b == b"z" {
        return Some(0);
    }
    let sign = match b.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest = &b[1..];
    let (hh, mm) = match rest.len() {
        4 => (&rest[..2], &rest[2..]),
        5 if rest[2] == b':' => (&rest[..2], &rest[3..]),
        2 => (rest, &b"00"[..]),
        _ => return None,
    };
    let (hh, mm) = (digits(hh)?, digits(mm)?);
    (hh <= 23 && mm <= 59).then(|| sign * (i64::from(hh) * 3600 + i64::from(mm) * 60))
}

fn month(b: &[u8]) -> Option<u32> {
    const NAMES: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(b))
        .map(|i| i as u32 + 1)
}

/// `10/Oct/2000:13:55:36 -0700` (the brackets already removed).
pub fn parse_clf(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 26 || b[2] != b'/' || b[6] != b'/' || b[11] != b':' || b[14] != b':' {
        return None;
    }
    if b[17] != b':' || b[20] != b' ' {
        return None;
    }
    to_ms(
        [digits(&b[7..11])?, month(&b[3..6])?, digits(&b[0..2])?],
        [
            digits(&b[12..14])?,
            digits(&b[15..17])?,
            digits(&b[18..20])?,
            0,
        ],
        offset(&b[21..])?,
    )
}

/// `2000-10-10T13:55:36[.fff][Z|±hh:mm]` (a space may stand for the `T`; no offset = UTC).
pub fn parse_iso8601(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let mut rest = &b[19..];
    let mut ms = 0;
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        // Milliseconds: the first three digits, padded (`.5` is 500 ms).
        let mut three = [b'0'; 3];
        for (dst, src) in three.iter_mut().zip(&frac[..n]) {
            *dst = *src;
        }
        ms = digits(&three)?;
        rest = &frac[n..];
    }
    let off = if rest.is_empty() { 0 } else { offset(rest)? };
    to_ms(
        [digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?],
        [
            digits(&b[11..13])?,
            digits(&b[14..16])?,
            digits(&b[17..19])?,
            ms,
        ],
        off,
    )
}

/// `1714564800` or `1714564800.123` (nginx `$msec`).
pub fn parse_epoch(text: &str) -> Option<u64> {
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    if secs.is_empty() || secs.len() > 12 || !secs.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let s: u64 = secs.parse().ok()?;
    let mut ms = 0u64;
    for (i, c) in frac.bytes().take(3).enumerate() {
        ms += u64::from(c - b'0') * [100, 10, 1][i];
    }
    s.checked_mul(1000)?.checked_add(ms)
}

/// Any of the three forms.
pub fn parse_any(text: &str) -> Option<u64> {
    let t = text.trim();
    match t.as_bytes() {
        [_, _, b'/', ..] => parse_clf(t),
        [_, _, _, _, b'-', ..] => parse_iso8601(t),
        _ => parse_epoch(t),
    }
}

/// Epoch milliseconds as RFC 3339 UTC (`2000-10-10T20:55:36Z`; milliseconds only when set).
pub fn format_rfc3339(ms: u64) -> String {
    let secs = i64::try_from(ms / 1000).unwrap_or(i64::MAX);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let day = secs.rem_euclid(86_400);
    let (h, mi, s) = (day / 3600, day % 3600 / 60, day % 60);
    match ms % 1000 {
        0 => format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"),
        frac => format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{frac:03}Z"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clf_with_offsets() {
        // 2000-10-10T20:55:36Z, the Apache documentation's example.
        assert_eq!(
            parse_clf("10/Oct/2000:13:55:36 -0700"),
            Some(971_211_336_000)
        );
        assert_eq!(
            parse_clf("10/Oct/2000:20:55:36 +0000"),
            Some(971_211_336_000)
        );
        assert_eq!(parse_clf("01/Jan/1970:00:00:00 +0000"), Some(0));
        assert_eq!(
            parse_clf("29/Feb/2024:23:59:59 +0000"),
            Some(1_709_251_199_000)
        );
    }

    #[test]
    fn iso8601_forms() {
        assert_eq!(parse_iso8601("2000-10-10T20:55:36Z"), Some(971_211_336_000));
        assert_eq!(
            parse_iso8601("2000-10-10T22:55:36+02:00"),
            Some(971_211_336_000)
        );
        assert_eq!(parse_iso8601("2000-10-10 20:55:36"), Some(971_211_336_000));
        assert_eq!(
            parse_iso8601("2000-10-10T20:55:36.5Z"),
            Some(971_211_336_500)
        );
        assert_eq!(
            parse_iso8601("2000-10-10T20:55:36.123456+0000"),
            Some(971_211_336_123)
        );
    }

    #[test]
    fn epoch_seconds() {
        assert_eq!(parse_epoch("971211336"), Some(971_211_336_000));
        assert_eq!(parse_epoch("971211336.042"), Some(971_211_336_042));
        assert_eq!(parse_any(" 971211336.1 "), Some(971_211_336_100));
    }

    #[test]
    fn nonsense_is_none_never_a_panic() {
        for bad in [
            "",
            "-",
            "31/Feb/2024:00:00:00 +0000",
            "10/Foo/2000:13:55:36 -0700",
            "10/Oct/2000:24:00:00 +0000",
            "10/Oct/2000:13:55:36",
            "10/Oct/2000:13:55:36 +99999",
            "01/Jan/1969:23:59:59 +0000",
            "2000-13-10T20:55:36Z",
            "2000-10-10T20:55:36.Z",
            "2000-10-10T20:55:36+2",
            "1e9",
            "12.3.4",
            "99999999999999999999",
            "10/Oct/2000:13:55:36 -0700 trailing",
            "ü0/Oct/2000:13:55:36 -0700",
        ] {
            assert_eq!(parse_any(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for ms in [
            0,
            971_211_336_000,
            1_709_251_199_000,
            1_709_251_199_042,
            253_402_300_799_000,
        ] {
            let text = format_rfc3339(ms);
            assert_eq!(parse_iso8601(&text), Some(ms), "{text}");
        }
        assert_eq!(format_rfc3339(971_211_336_000), "2000-10-10T20:55:36Z");
    }
}
