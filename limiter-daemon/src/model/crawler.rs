//! What became of a caller's claim to be a search engine or archive: the proof that made it a
//! verified crawler, or why it is metered as what it otherwise is.

/// Set on a decision when the source is in a published range, or the user agent claims a
/// crawler (only then is reverse DNS asked).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CrawlerStatus {
    /// The source is in an operator-supplied published range file: metered `crawler`.
    Ranges,
    /// Forward-confirmed reverse DNS under a configured suffix: metered `crawler`.
    Dns,
    /// Claims a crawler; the DNS answer has not landed yet: metered as what it otherwise is.
    Pending,
    /// Claims a crawler from an address no proof vouches for: metered as what it is, counted.
    Fake,
}

impl CrawlerStatus {
    pub const ALL: [CrawlerStatus; 4] = [
        CrawlerStatus::Ranges,
        CrawlerStatus::Dns,
        CrawlerStatus::Pending,
        CrawlerStatus::Fake,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CrawlerStatus::Ranges => "ranges",
            CrawlerStatus::Dns => "dns",
            CrawlerStatus::Pending => "pending",
            CrawlerStatus::Fake => "fake",
        }
    }

    /// Position in [`CrawlerStatus::ALL`].
    pub fn index(self) -> usize {
        match self {
            CrawlerStatus::Ranges => 0,
            CrawlerStatus::Dns => 1,
            CrawlerStatus::Pending => 2,
            CrawlerStatus::Fake => 3,
        }
    }

    /// A proof held: the caller is metered on the crawler rung.
    pub fn is_verified(self) -> bool {
        matches!(self, CrawlerStatus::Ranges | CrawlerStatus::Dns)
    }
}
