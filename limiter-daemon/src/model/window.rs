//! The counting windows, described once: [`WINDOWS`], a table indexed by [`WindowKind`], says of
//! each window its name, span, what it counts, how it rolls over, the [`Reason`] it refuses with
//! and its rank when several refuse. Counting (`store::count`), the Valkey script's arguments,
//! the decision's windows and reason (`engine::decide`) and the headers all read it, so adding a
//! window is a row here plus the places the compiler names (where its limit comes from).
//!
//! Also here: [`PerWindow`], one value per window, and a window's use after a request.

use std::ops::{Index, IndexMut};

/// Length of the burst window (sliding: any span ending now).
pub const BURST_SPAN_MS: u64 = 60_000;
/// Length of a UTC hour.
pub const HOUR_MS: u64 = 3_600_000;
/// Length of a UTC day.
pub const DAY_MS: u64 = 86_400_000;

/// The windows, in the order decisions list them ([`WindowKind::ALL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    Burst,
    Hourly,
    Daily,
    KeyHourly,
}

impl WindowKind {
    /// Every window, in the order decisions and headers list them (and [`WINDOWS`] holds them).
    pub const ALL: [WindowKind; 4] = [
        WindowKind::Burst,
        WindowKind::Hourly,
        WindowKind::Daily,
        WindowKind::KeyHourly,
    ];
    pub const COUNT: usize = WindowKind::ALL.len();

    /// Position in [`WindowKind::ALL`] (and in every [`PerWindow`]).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// This window's row of [`WINDOWS`].
    pub fn spec(self) -> &'static WindowSpec {
        &WINDOWS[self]
    }

    /// Name as in `RateLimit-Policy`.
    pub fn as_str(self) -> &'static str {
        self.spec().name
    }
}

/// Why a request was rejected: a window's refusal (see [`WindowSpec::reason`]) or a lockout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Burst,
    Hourly,
    Daily,
    KeyHourly,
    Locked,
    /// The remote store is down and `[store] on_failure = "closed"` (a 503, not a 429).
    Unavailable,
    /// The caller's network (prefix or autonomous system) is over its own budget
    /// (`[networks]`): many addresses metered as one.
    Network,
    /// The upstream is saturated and this caller's tier is past its share of it (`[overload]`):
    /// a 503, not a 429, and nothing counted.
    Overload,
}

impl Reason {
    /// Every reason: the windows' in [`WindowKind::ALL`] order, then `locked`, `unavailable`,
    /// `network`, `overload`.
    pub const ALL: [Reason; WindowKind::COUNT + 4] = {
        let mut all = [Reason::Locked; WindowKind::COUNT + 4];
        all[WindowKind::COUNT + 1] = Reason::Unavailable;
        all[WindowKind::COUNT + 2] = Reason::Network;
        all[WindowKind::COUNT + 3] = Reason::Overload;
        let mut i = 0;
        while i < WindowKind::COUNT {
            all[i] = SPECS[i].reason;
            i += 1;
        }
        all
    };

    /// Position in [`Reason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The window that refuses with this reason for the caller itself (`None` for a lockout,
    /// an outage, or a network's windows).
    pub fn window(self) -> Option<WindowKind> {
        WINDOWS.0.iter().find(|s| s.reason == self).map(|s| s.kind)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Locked => "locked",
            Reason::Unavailable => "unavailable",
            Reason::Network => "network",
            Reason::Overload => "overload",
            _ => self.window().map_or("locked", WindowKind::as_str),
        }
    }
}

/// What a window counts per admitted request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counts {
    /// One per request, whatever the route costs (burst).
    Requests,
    /// The route's cost in units.
    Units,
}

impl Counts {
    /// What one admitted request of `cost` units adds to the window.
    pub fn per_request(self, cost: u32) -> u32 {
        match self {
            Counts::Requests => 1,
            Counts::Units => cost,
        }
    }
}

/// How a window forgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Any span ending now (a ring of 5 s slots, `store::windows::BurstRing`).
    Sliding,
    /// Aligned to UTC: rolls over when the epoch time is a multiple of the span.
    Fixed,
}

/// One window, described once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowSpec {
    pub kind: WindowKind,
    /// Name in `RateLimit-Policy`, `RateLimit`, decisions and the Valkey script's comments.
    pub name: &'static str,
    /// Its part of a store key (`<quota key>:<store_key>[:<window index>]`). Remote stores keep
    /// counts under it across restarts and versions: never change a row's value.
    pub store_key: &'static str,
    pub span_ms: u64,
    pub shape: Shape,
    pub counts: Counts,
    /// Whether a request this window sees counts in it even when it is refused (by this
    /// window or any other). The burst window does: it measures what arrives, so a loop
    /// hammering after its budget is spent is still a burst. Budgets count only what they
    /// admit.
    pub counts_refused: bool,
    /// Whether a route's `limits` names it (a route without `limits` counts in every such
    /// window). The key window is not named there: a route turns it on with `key_limit`.
    pub route_limit: bool,
    /// What a reject by this window says.
    pub reason: Reason,
    /// When several windows refuse, the lowest rank names the reason. A burst comes first: it
    /// is the only refusal that earns a strike, and it only refuses a caller above its burst
    /// rate, whatever else is spent. Then the spent budgets, hourly before key and daily.
    pub rank: u8,
}

impl WindowSpec {
    /// Whether a window holding `used` of `max` refuses one more request of `cost`: when what it
    /// would hold after the request is over `max` (for a request-counting window, `used >= max`).
    pub fn refuses(&self, used: u32, cost: u32, max: u32) -> bool {
        used.saturating_add(self.counts.per_request(cost)) > max
    }
}

const SPECS: [WindowSpec; WindowKind::COUNT] = [
    WindowSpec {
        kind: WindowKind::Burst,
        name: "burst",
        store_key: "burst",
        span_ms: BURST_SPAN_MS,
        shape: Shape::Sliding,
        counts: Counts::Requests,
        counts_refused: true,
        route_limit: true,
        reason: Reason::Burst,
        rank: 0,
    },
    WindowSpec {
        kind: WindowKind::Hourly,
        name: "hourly",
        store_key: "h",
        span_ms: HOUR_MS,
        shape: Shape::Fixed,
        counts: Counts::Units,
        counts_refused: false,
        route_limit: true,
        reason: Reason::Hourly,
        rank: 1,
    },
    WindowSpec {
        kind: WindowKind::Daily,
        name: "daily",
        store_key: "d",
        span_ms: DAY_MS,
        shape: Shape::Fixed,
        counts: Counts::Units,
        counts_refused: false,
        route_limit: true,
        reason: Reason::Daily,
        rank: 3,
    },
    WindowSpec {
        kind: WindowKind::KeyHourly,
        name: "key_hourly",
        store_key: "kh",
        span_ms: HOUR_MS,
        shape: Shape::Fixed,
        counts: Counts::Units,
        counts_refused: false,
        route_limit: false,
        reason: Reason::KeyHourly,
        rank: 2,
    },
];

// Row `i` describes `ALL[i]`, ranks and reasons are distinct, `Reason::ALL[i]` is the reason of
// index `i`: checked when the crate compiles.
const _: () = {
    let mut r = 0;
    while r < Reason::ALL.len() {
        assert!(Reason::ALL[r] as usize == r);
        r += 1;
    }
    let mut i = 0;
    while i < WindowKind::COUNT {
        assert!(SPECS[i].kind as usize == i);
        assert!(WindowKind::ALL[i] as usize == i);
        let mut j = i + 1;
        while j < WindowKind::COUNT {
            assert!(SPECS[i].rank != SPECS[j].rank);
            assert!(SPECS[i].reason as usize != SPECS[j].reason as usize);
            j += 1;
        }
        i += 1;
    }
};

/// The windows, indexed by kind.
pub static WINDOWS: PerWindow<WindowSpec> = PerWindow(SPECS);

/// One `T` per window, in [`WindowKind::ALL`] order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PerWindow<T>(pub [T; WindowKind::COUNT]);

impl<T> PerWindow<T> {
    /// `f(kind)` for every kind.
    pub fn from_fn(mut f: impl FnMut(WindowKind) -> T) -> Self {
        PerWindow(std::array::from_fn(|i| f(WindowKind::ALL[i])))
    }

    /// The same with `kind`'s value set to `value`.
    pub fn with(mut self, kind: WindowKind, value: T) -> Self {
        self[kind] = value;
        self
    }

    /// `(kind, value)` in [`WindowKind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (WindowKind, &T)> + '_ {
        WindowKind::ALL.into_iter().zip(self.0.iter())
    }

    pub fn map<U>(&self, mut f: impl FnMut(WindowKind, &T) -> U) -> PerWindow<U> {
        PerWindow::from_fn(|k| f(k, &self[k]))
    }
}

impl<T> Index<WindowKind> for PerWindow<T> {
    type Output = T;
    fn index(&self, kind: WindowKind) -> &T {
        &self.0[kind.index()]
    }
}

impl<T> IndexMut<WindowKind> for PerWindow<T> {
    fn index_mut(&mut self, kind: WindowKind) -> &mut T {
        &mut self.0[kind.index()]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serde_names() {
        for kind in WindowKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            let reason = kind.spec().reason;
            assert_eq!(reason.window(), Some(kind));
            assert_eq!(serde_json::to_string(&reason).unwrap(), json);
        }
        assert_eq!(Reason::Locked.window(), None);
        assert_eq!(Reason::Locked.as_str(), "locked");
        assert_eq!(
            Reason::ALL.map(Reason::as_str),
            [
                "burst",
                "hourly",
                "daily",
                "key_hourly",
                "locked",
                "unavailable",
                "network",
                "overload"
            ]
        );
    }

    #[test]
    fn request_windows_refuse_at_the_limit_unit_windows_over_it() {
        let burst = WindowKind::Burst.spec();
        assert!(!burst.refuses(4, 9, 5));
        assert!(burst.refuses(5, 1, 5));
        let hourly = WindowKind::Hourly.spec();
        assert!(!hourly.refuses(3, 2, 5));
        assert!(hourly.refuses(4, 2, 5));
    }
}
