//! Durations as operators write them: `90s`, `10m`, `1h30m`, `7d`, `2w`. The one parser every
//! duration goes through (admin API bodies, limiterctl and `kernel` arguments, config fields),
//! so a value means the same thing wherever it is typed.
//!
//! The grammar is strict on purpose: one or more `<digits><unit>` parts, no spaces inside,
//! units case-sensitive. A general parser (humantime) reads `10M` as ten *months* and `1y` as a
//! year, so a typo for minutes became a lockout of most of a year; here anything but the listed
//! units is an error that names the value. Operator inputs take `s m h d w`; config files also
//! take `ms`, because their timeouts are sub-second (`decision_timeout = "50ms"`).

use std::time::Duration;

/// Which units a field accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Units {
    /// Lockouts and list entries (API, limiterctl, `kernel`): `s m h d w`.
    Operator,
    /// Config fields: `ms s m h d w`.
    Config,
}

impl Units {
    fn allowed(self) -> &'static str {
        match self {
            Units::Operator => "s, m, h, d, w",
            Units::Config => "ms, s, m, h, d, w",
        }
    }

    /// Milliseconds in one `unit`, when this set accepts it.
    fn unit_ms(self, unit: &str) -> Option<u64> {
        Some(match unit {
            "ms" if self == Units::Config => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            _ => return None,
        })
    }
}

/// Why a text is not a duration; every variant quotes the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationTextError {
    #[error(
        "{text:?} is not a duration: write a number and a unit ({allowed}), e.g. 90s, 10m, 1h30m"
    )]
    Syntax { text: String, allowed: &'static str },
    #[error("{text:?} is not a duration: {unit:?} is not a unit (units are {allowed}, lower case; e.g. 90s, 10m, 1h30m)")]
    Unit {
        text: String,
        unit: String,
        allowed: &'static str,
    },
    #[error("{text:?} is too long a duration")]
    Overflow { text: String },
}

/// Parses `text` (surrounding whitespace ignored) with the units of `units`. Zero parses
/// (`0s`); callers that need a positive duration say so themselves.
pub fn parse(text: &str, units: Units) -> Result<Duration, DurationTextError> {
    let t = text.trim();
    let allowed = units.allowed();
    let syntax = || DurationTextError::Syntax {
        text: text.to_string(),
        allowed,
    };
    let overflow = || DurationTextError::Overflow {
        text: text.to_string(),
    };
    if t.is_empty() {
        return Err(syntax());
    }
    let mut rest = t;
    let mut total_ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let letters = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        if digits == 0 || letters == 0 {
            return Err(syntax());
        }
        let (number, unit) = (&rest[..digits], &rest[digits..digits + letters]);
        let per = units.unit_ms(unit).ok_or_else(|| DurationTextError::Unit {
            text: text.to_string(),
            unit: unit.to_string(),
            allowed,
        })?;
        let n: u64 = number.parse().map_err(|_| overflow())?;
        total_ms = n
            .checked_mul(per)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(overflow)?;
        rest = &rest[digits + letters..];
    }
    Ok(Duration::from_millis(total_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(t: &str) -> Result<u64, DurationTextError> {
        parse(t, Units::Operator).map(|d| d.as_secs())
    }

    #[test]
    fn the_listed_units_and_their_sums() {
        assert_eq!(op("90s"), Ok(90));
        assert_eq!(op("10m"), Ok(600));
        assert_eq!(op("2h"), Ok(7200));
        assert_eq!(op("1h30m"), Ok(5400));
        assert_eq!(op(" 7d "), Ok(7 * 86_400));
        assert_eq!(op("2w"), Ok(14 * 86_400));
        assert_eq!(op("0s"), Ok(0));
        assert_eq!(parse("50ms", Units::Config), Ok(Duration::from_millis(50)));
        assert_eq!(
            parse("1s500ms", Units::Config),
            Ok(Duration::from_millis(1500))
        );
    }

    /// `10M` was ten months through humantime; `1y`, `5min`, `1 hour` were accepted too.
    #[test]
    fn months_years_long_names_and_capitals_are_refused_naming_the_unit() {
        for (text, unit) in [
            ("10M", "M"),
            ("1y", "y"),
            ("3months", "months"),
            ("5min", "min"),
            ("2H", "H"),
            ("1D", "D"),
            ("10S", "S"),
            ("1fortnight", "fortnight"),
        ] {
            let err = parse(text, Units::Operator).unwrap_err();
            assert_eq!(
                err,
                DurationTextError::Unit {
                    text: text.into(),
                    unit: unit.into(),
                    allowed: "s, m, h, d, w"
                }
            );
            assert!(err.to_string().contains(text), "{err}");
        }
        // Milliseconds are for config timeouts, not lockouts.
        assert!(matches!(
            parse("500ms", Units::Operator),
            Err(DurationTextError::Unit { .. })
        ));
    }

    #[test]
    fn shapes_that_are_not_durations() {
        for bad in [
            "", "  ", "soon", "10", "m", "1 hour", "1h 30m", "-5m", "1.5h", "1h+",
        ] {
            assert!(
                matches!(
                    parse(bad, Units::Config),
                    Err(DurationTextError::Syntax { .. } | DurationTextError::Unit { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse("99999999999999999999s", Units::Operator),
            Err(DurationTextError::Overflow { .. })
        ));
        assert!(matches!(
            parse("9999999999999999w", Units::Operator),
            Err(DurationTextError::Overflow { .. })
        ));
    }
}
