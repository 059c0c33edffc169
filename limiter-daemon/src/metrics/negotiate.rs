//! Which exposition format a scrape asked for, from its `Accept` header.
//!
//! OpenMetrics is the default (a missing `Accept`, `*/*`, or nothing this listener knows): what
//! `/metrics` has always answered and what Prometheus asks for first. The classic text format
//! (0.0.4) goes to whoever prefers `text/plain` over `application/openmetrics-text`, by q-value:
//! `promtool check metrics`, Prometheus with `scrape_protocols: [PrometheusText0.0.4]`, older
//! agents.

/// The format of one `/metrics` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    /// Prometheus' classic text format, version 0.0.4.
    Text,
}

/// The format `accept` (the header's value, if any) prefers.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::OpenMetrics;
    };
    let (mut openmetrics, mut text) = (0.0_f32, 0.0_f32);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(Some(1.0), |(_, v)| v.trim().parse::<f32>().ok())
            // A q that does not parse counts as not acceptable rather than as preferred.
            .unwrap_or(0.0);
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(q),
            "text/plain" | "text/*" => text = text.max(q),
            _ => {}
        }
    }
    if text > openmetrics {
        Format::Text
    } else {
        Format::OpenMetrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_goes_to_whoever_prefers_it_and_openmetrics_stays_the_default() {
        for (accept, want) in [
            (None, Format::OpenMetrics),
            (Some("*/*"), Format::OpenMetrics),
            (Some("application/json"), Format::OpenMetrics),
            (Some("text/plain; version=0.0.4"), Format::Text),
            (
                Some("text/plain;version=0.0.4;q=0.9,*/*;q=0.1"),
                Format::Text,
            ),
            (Some("TEXT/PLAIN"), Format::Text),
            (
                Some("application/openmetrics-text; version=1.0.0"),
                Format::OpenMetrics,
            ),
            // Prometheus 2.x's own scrape header.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                     version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                Format::OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0.2,text/plain;version=0.0.4;q=0.5"),
                Format::Text,
            ),
            (Some("text/plain;q=oops"), Format::OpenMetrics),
        ] {
            assert_eq!(negotiate(accept), want, "{accept:?}");
        }
    }
}
