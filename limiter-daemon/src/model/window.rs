//! The counting windows (burst, hourly, daily, key hourly) and a window's use after a request.

/// Names of the windows, as used in `RateLimit-Policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    Burst,
    Hourly,
    Daily,
    KeyHourly,
}

impl WindowKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WindowKind::Burst => "burst",
            WindowKind::Hourly => "hourly",
            WindowKind::Daily => "daily",
            WindowKind::KeyHourly => "key_hourly",
        }
    }
}

/// Use of one window after this request was counted (or refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WindowState {
    pub kind: WindowKind,
    /// Units allowed in the window.
    pub limit: u64,
    /// Units left (0 when exhausted).
    pub remaining: u64,
    /// Window length in seconds (60, 3600, 86400).
    pub window_secs: u64,
    /// Seconds until the window frees capacity (fixed windows: until rollover).
    pub reset_secs: u64,
}
