//! The classic Prometheus text format (version 0.0.4), made from the registry's OpenMetrics
//! text: `prometheus_client` encodes OpenMetrics only, and the two differ in a few names and
//! lines, not in the series.
//!
//! What changes: a counter's `# HELP`/`# TYPE` name the `_total` series (OpenMetrics names the
//! family without it, which the classic parser reads as a family with no samples and a series
//! with no help); `info` becomes a `gauge` named `_info`, `stateset` a `gauge`, `unknown`
//! `untyped`, `gaugehistogram` a `histogram` (`_gsum`/`_gcount` as `_sum`/`_count`); `_created`
//! series, `# UNIT`, `# EOF` and exemplars are dropped; timestamps go from seconds to
//! milliseconds; `HELP` text escapes `\` and newlines as the classic format reads them.

/// Content type of [`from_openmetrics`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One family's type, as OpenMetrics declared it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Info,
    StateSet,
    GaugeHistogram,
    Summary,
    Other,
}

/// The classic text of `om`, an OpenMetrics exposition.
pub fn from_openmetrics(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    // `# HELP` comes before `# TYPE`: held until the type says which name it belongs to.
    let mut help: Option<(&str, &str)> = None;
    let mut kind = Kind::Other;
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, help.take());
            help = rest.split_once(' ').or(Some((rest, "")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, om_type) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, classic) = match om_type {
                "counter" => (suffixed(family, "_total"), "counter"),
                "info" => (suffixed(family, "_info"), "gauge"),
                "stateset" => (family.to_string(), "gauge"),
                "gaugehistogram" => (family.to_string(), "histogram"),
                "unknown" => (family.to_string(), "untyped"),
                other => (family.to_string(), other),
            };
            kind = match om_type {
                "counter" => Kind::Counter,
                "info" => Kind::Info,
                "stateset" => Kind::StateSet,
                "gaugehistogram" => Kind::GaugeHistogram,
                "summary" => Kind::Summary,
                _ => Kind::Other,
            };
            match help.take() {
                Some((h, text)) if h == family => {
                    out.push_str("# HELP ");
                    out.push_str(&name);
                    out.push(' ');
                    push_help_text(&mut out, text);
                    out.push('\n');
                }
                other => flush_help(&mut out, other),
            }
            out.push_str("# TYPE ");
            out.push_str(&name);
            out.push(' ');
            out.push_str(classic);
            out.push('\n');
        } else if line.starts_with('#') || line.is_empty() {
            // `# UNIT`, `# EOF`: nothing the classic format has.
        } else {
            sample(&mut out, line, kind);
        }
    }
    flush_help(&mut out, help);
    out
}

fn suffixed(family: &str, suffix: &str) -> String {
    if family.ends_with(suffix) {
        family.to_string()
    } else {
        format!("{family}{suffix}")
    }
}

fn flush_help(out: &mut String, help: Option<(&str, &str)>) {
    if let Some((name, text)) = help {
        out.push_str("# HELP ");
        out.push_str(name);
        out.push(' ');
        push_help_text(out, text);
        out.push('\n');
    }
}

/// OpenMetrics escapes `"` in help text too; the classic format knows `\\` and `\n` only.
fn push_help_text(out: &mut String, text: &str) {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.peek() {
                Some('\\') | Some('n') => {
                    out.push('\\');
                    out.extend(chars.next());
                }
                Some('"') => {
                    out.push('"');
                    chars.next();
                }
                _ => out.push_str("\\\\"),
            },
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// One sample line: its name, labels, value and timestamp, without an exemplar.
fn sample(out: &mut String, line: &str, kind: Kind) {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..name_end];
    let (labels, rest) = if line[name_end..].starts_with('{') {
        let close = name_end + labels_end(&line[name_end..]);
        (&line[name_end..close], &line[close..])
    } else {
        ("", &line[name_end..])
    };
    let created = name.ends_with("_created");
    if created
        && matches!(
            kind,
            Kind::Counter | Kind::Summary | Kind::Info | Kind::StateSet
        )
    {
        return;
    }
    let name = match kind {
        Kind::GaugeHistogram => {
            if let Some(base) = name.strip_suffix("_gsum") {
                format!("{base}_sum")
            } else if let Some(base) = name.strip_suffix("_gcount") {
                format!("{base}_count")
            } else {
                name.to_string()
            }
        }
        _ => name.to_string(),
    };
    // The value, then a timestamp; an exemplar follows ` # `.
    let rest = rest.split(" # ").next().unwrap_or("");
    let mut fields = rest.split_whitespace();
    let Some(value) = fields.next() else {
        return;
    };
    out.push_str(&name);
    out.push_str(labels);
    out.push(' ');
    out.push_str(value);
    if let Some(ts) = fields.next().and_then(|t| t.parse::<f64>().ok()) {
        out.push(' ');
        out.push_str(&((ts * 1000.0).round() as i64).to_string());
    }
    out.push('\n');
}

/// The byte just past the `}` closing the label set `s` starts with (quotes and escapes
/// respected: a label value may hold `}`).
fn labels_end(s: &str) -> usize {
    let (mut quoted, mut escaped) = (false, false);
    for (i, b) in s.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b'}' if !quoted => return i + 1,
            _ => {}
        }
    }
    s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_renamed_and_openmetrics_only_lines_dropped() {
        let om = "# HELP ns_hits Hits with a \\\"quote\\\" and a \\\\.\n\
                  # TYPE ns_hits counter\n\
                  ns_hits_total{path=\"/a}b\\\"c\"} 3 # {trace=\"x\"} 1.0\n\
                  ns_hits_created{path=\"/a\"} 1.7e9\n\
                  # HELP ns_build Build.\n\
                  # TYPE ns_build info\n\
                  ns_build_info{version=\"1\"} 1\n\
                  # HELP ns_wait_seconds Waits.\n\
                  # TYPE ns_wait_seconds histogram\n\
                  # UNIT ns_wait_seconds seconds\n\
                  ns_wait_seconds_bucket{le=\"+Inf\"} 2\n\
                  ns_wait_seconds_sum 0.5\n\
                  ns_wait_seconds_count 2\n\
                  # HELP ns_up Up.\n\
                  # TYPE ns_up gauge\n\
                  ns_up 1 1700000000.5\n\
                  # EOF\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP ns_hits_total Hits with a \"quote\" and a \\\\.\n\
             # TYPE ns_hits_total counter\n\
             ns_hits_total{path=\"/a}b\\\"c\"} 3\n\
             # HELP ns_build_info Build.\n\
             # TYPE ns_build_info gauge\n\
             ns_build_info{version=\"1\"} 1\n\
             # HELP ns_wait_seconds Waits.\n\
             # TYPE ns_wait_seconds histogram\n\
             ns_wait_seconds_bucket{le=\"+Inf\"} 2\n\
             ns_wait_seconds_sum 0.5\n\
             ns_wait_seconds_count 2\n\
             # HELP ns_up Up.\n\
             # TYPE ns_up gauge\n\
             ns_up 1 1700000000500\n"
        );
    }
}
