//! One atomic check-and-count: the single operation a store performs per decision. It checks
//! every window of one identity and, only if none refuses, counts the request in all of them.
//! A refused request consumes no budget; only windows that count every arrival
//! ([`WindowSpec::counts_refused`]: the burst) count it anyway, so a caller hammering a spent
//! budget still fills its burst window and a caller at or below its burst rate never does.
//!
//! [`apply`] is the reference semantics on one identity's [`Entry`], a loop over the window
//! table ([`crate::model::WINDOWS`]): a window refuses when what it would hold after the request
//! is over its limit ([`WindowSpec::refuses`]), and counts one per request or the route's cost
//! ([`crate::model::Counts`]). The embedded store calls it under a shard lock, and a Valkey
//! backend implements the same steps in one script.
//!
//! A request may also count against the caller's networks ([`NetCount`]: its prefix, its
//! autonomous system), each with windows of its own. [`apply_all`] is then the reference: the
//! request is admitted only when no window of any holder refuses, and only then counted in the
//! budgets of all of them (the burst of each counts every arrival). A store that keeps the
//! holders apart (Valkey: one cluster slot each) counts each on its own, at once, and
//! [`combine`] turns those answers into the same one, naming the units to give back.

use super::windows::{self, BurstRing, Fixed};
use crate::identity::hash::IdKey;
use crate::model::{NetLevel, PerWindow, Shape, WindowKind, WindowSpec};

/// Network levels a request can count against ([`NetLevel::ALL`]).
pub const NET_LEVELS: usize = NetLevel::ALL.len();

/// One window's limit for this request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub max: u32,
    /// `true`: over `max` refuses. `false` (the daily quota in delay mode): always counts; the
    /// engine turns the count into a delay.
    pub refuse: bool,
}

impl Limit {
    /// A limit that refuses over `max`.
    pub fn refusing(max: u32) -> Limit {
        Limit { max, refuse: true }
    }
}

/// What to check and count for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountRequest {
    pub id: IdKey,
    pub now_ms: u64,
    /// Units for the windows that count units (burst counts requests).
    pub cost: u32,
    /// The windows that apply, with their limits (`None`: not checked, not counted).
    pub limits: PerWindow<Option<Limit>>,
    /// The caller's networks, by [`NetLevel`] index (`None`: not counted there).
    pub networks: [Option<NetCount>; NET_LEVELS],
}

/// A network's share of a request: its identity and the windows it has (burst and hourly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetCount {
    pub id: IdKey,
    pub limits: PerWindow<Option<Limit>>,
}

impl CountRequest {
    /// A request for `id` alone: no networks.
    pub fn new(id: IdKey, now_ms: u64, cost: u32, limits: PerWindow<Option<Limit>>) -> Self {
        CountRequest {
            id,
            now_ms,
            cost,
            limits,
            networks: [None; NET_LEVELS],
        }
    }

    /// Whether any network counts this request.
    pub fn has_networks(&self) -> bool {
        self.networks.iter().any(Option::is_some)
    }

    /// The request as network `level` alone sees it (for a store counting holders apart).
    pub fn for_network(&self, level: usize) -> Option<CountRequest> {
        let n = self.networks.get(level).copied().flatten()?;
        Some(CountRequest::new(n.id, self.now_ms, self.cost, n.limits))
    }

    /// The request without its networks.
    pub fn caller_only(&self) -> CountRequest {
        CountRequest {
            networks: [None; NET_LEVELS],
            ..*self
        }
    }
}

/// One window after the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowUse {
    pub limit: u32,
    /// Count after this request when the window counted it (admitted, or a window that counts
    /// refused requests too), else before it.
    pub used: u32,
    /// Milliseconds until the window frees capacity (fixed windows: until rollover).
    pub reset_ms: u64,
}

impl WindowUse {
    pub fn remaining(&self) -> u32 {
        self.limit.saturating_sub(self.used)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountOutcome {
    /// No window refused: the request was counted in every window that applies.
    pub admitted: bool,
    /// Which windows refused (several may).
    pub refused: PerWindow<bool>,
    /// The windows that applied.
    pub uses: PerWindow<Option<WindowUse>>,
    /// Each network's windows, by [`NetLevel`] index, where the request counted against one.
    pub networks: [Option<NetUse>; NET_LEVELS],
}

/// One network's windows after the operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetUse {
    pub refused: PerWindow<bool>,
    pub uses: PerWindow<Option<WindowUse>>,
}

impl NetUse {
    pub fn refuses(&self) -> bool {
        self.refused.0.contains(&true)
    }
}

impl CountOutcome {
    /// The windows that refused, in [`WindowKind::ALL`] order.
    pub fn refusing(&self) -> impl Iterator<Item = WindowKind> + '_ {
        self.refused.iter().filter(|(_, r)| **r).map(|(k, _)| k)
    }
}

/// Every window of one identity: 52 bytes (the compact windows of [`super::windows`]), so a
/// million identities fit in about 80 MB with their keys and the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub burst: BurstRing,
    pub hour: Fixed,
    pub day: Fixed,
    pub key_hour: Fixed,
    /// Seconds since the epoch of the last operation (for eviction order).
    pub last_seen_s: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 52);

/// A window's counter in an [`Entry`].
enum Counter<'a> {
    Ring(&'a mut BurstRing),
    Fixed(&'a mut Fixed, &'static WindowSpec),
}

impl Counter<'_> {
    fn used(&self, now_ms: u64) -> u32 {
        match self {
            Counter::Ring(r) => r.used(now_ms),
            Counter::Fixed(f, spec) => f.used_at(windows::index(now_ms, spec.span_ms)),
        }
    }

    fn add(&mut self, now_ms: u64, n: u32) {
        match self {
            Counter::Ring(r) => r.add(now_ms, n),
            Counter::Fixed(f, spec) => f.add(windows::index(now_ms, spec.span_ms), n),
        }
    }

    fn reset_ms(&self, now_ms: u64) -> u64 {
        match self {
            Counter::Ring(r) => r.reset_ms(now_ms),
            Counter::Fixed(_, spec) => windows::until_rollover(now_ms, spec.span_ms),
        }
    }
}

impl Entry {
    /// The counter of window `kind`: the one place an entry's fields meet the window table.
    fn counter(&mut self, kind: WindowKind) -> Counter<'_> {
        let spec = kind.spec();
        let counter = match kind {
            WindowKind::Burst => Counter::Ring(&mut self.burst),
            WindowKind::Hourly => Counter::Fixed(&mut self.hour, spec),
            WindowKind::Daily => Counter::Fixed(&mut self.day, spec),
            WindowKind::KeyHourly => Counter::Fixed(&mut self.key_hour, spec),
        };
        debug_assert_eq!(
            matches!(counter, Counter::Ring(_)),
            spec.shape == Shape::Sliding
        );
        counter
    }

    /// True when forgetting this entry changes no answer: nothing counted in any live window.
    pub fn is_stale(&self, now_ms: u64) -> bool {
        // Reads go through a copy (the entry is small and `Copy`), so one mapping serves both.
        let mut e = *self;
        WindowKind::ALL
            .into_iter()
            .all(|k| e.counter(k).used(now_ms) == 0)
    }
}

/// What a holder's windows hold before the request, and which refuse it.
struct Checked {
    used: PerWindow<u32>,
    refused: PerWindow<bool>,
}

fn check(e: &mut Entry, limits: &PerWindow<Option<Limit>>, now: u64, cost: u32) -> Checked {
    e.last_seen_s = u32::try_from(now / 1000).unwrap_or(u32::MAX);
    let used = PerWindow::from_fn(|k| e.counter(k).used(now));
    let refused = limits
        .map(|k, limit| limit.is_some_and(|l| l.refuse && k.spec().refuses(used[k], cost, l.max)));
    Checked { used, refused }
}

/// Counts the request in `e`'s windows: all of them when `admitted`, else only those that count
/// every arrival.
fn count(
    e: &mut Entry,
    limits: &PerWindow<Option<Limit>>,
    checked: &Checked,
    admitted: bool,
    now: u64,
    cost: u32,
) -> PerWindow<Option<WindowUse>> {
    limits.map(|k, limit| {
        let limit = (*limit)?;
        let spec = k.spec();
        let add = spec.counts.per_request(cost);
        let counted = admitted || spec.counts_refused;
        let mut c = e.counter(k);
        if counted {
            c.add(now, add);
        }
        Some(WindowUse {
            limit: limit.max,
            used: if counted {
                checked.used[k].saturating_add(add)
            } else {
                checked.used[k]
            },
            reset_ms: c.reset_ms(now),
        })
    })
}

/// Checks and counts `req` against `e`, the caller's windows only (its networks, if any, are
/// left out: [`apply_all`] counts them).
pub fn apply(e: &mut Entry, req: &CountRequest) -> CountOutcome {
    apply_all(e, [None, None], &req.caller_only())
}

/// Checks and counts `req` against the caller's entry `e` and its networks' entries `nets` (by
/// [`NetLevel`] index, present where `req.networks` is), as one atomic step.
pub fn apply_all(
    e: &mut Entry,
    mut nets: [Option<&mut Entry>; NET_LEVELS],
    req: &CountRequest,
) -> CountOutcome {
    let (now, cost) = (req.now_ms, req.cost);
    let caller = check(e, &req.limits, now, cost);
    let mut net_checks: [Option<Checked>; NET_LEVELS] = [None, None];
    for (i, n) in req.networks.iter().enumerate() {
        if let (Some(n), Some(ne)) = (n, nets[i].as_deref_mut()) {
            net_checks[i] = Some(check(ne, &n.limits, now, cost));
        }
    }
    let admitted = !caller.refused.0.contains(&true)
        && net_checks
            .iter()
            .flatten()
            .all(|c| !c.refused.0.contains(&true));
    let uses = count(e, &req.limits, &caller, admitted, now, cost);
    let mut networks = [None; NET_LEVELS];
    for (i, n) in req.networks.iter().enumerate() {
        if let (Some(n), Some(ne), Some(c)) = (n, nets[i].as_deref_mut(), &net_checks[i]) {
            networks[i] = Some(NetUse {
                refused: c.refused,
                uses: count(ne, &n.limits, c, admitted, now, cost),
            });
        }
    }
    CountOutcome {
        admitted,
        refused: caller.refused,
        uses,
        networks,
    }
}

/// Which holders counted units the combined answer refuses (caller first, then each network
/// by [`NetLevel`] index): a store counting them apart gives those units back.
pub type Refunds = [bool; 1 + NET_LEVELS];

/// The answer [`apply_all`] gives, from the caller and each network counted apart (each as if
/// alone: `nets[i]` is the outcome of `req.for_network(i)`). A holder that admitted the
/// request counted it in its budgets; when another holder refused, those units are not
/// spent: the outcome reports them given back, and [`Refunds`] says whose to give back.
pub fn combine(
    req: &CountRequest,
    caller: CountOutcome,
    nets: [Option<CountOutcome>; NET_LEVELS],
) -> (CountOutcome, Refunds) {
    let admitted = caller.admitted && nets.iter().flatten().all(|o| o.admitted);
    let mut refunds = [false; 1 + NET_LEVELS];
    let give_back = |o: &CountOutcome, refund: &mut bool| {
        let mut uses = o.uses;
        if o.admitted && !admitted {
            for (k, w) in uses.0.iter_mut().enumerate() {
                let spec = WindowKind::ALL[k].spec();
                if let Some(w) = w.as_mut().filter(|_| !spec.counts_refused) {
                    w.used = w.used.saturating_sub(spec.counts.per_request(req.cost));
                    *refund = true;
                }
            }
        }
        uses
    };
    let uses = give_back(&caller, &mut refunds[0]);
    let mut networks = [None; NET_LEVELS];
    for (i, o) in nets.iter().enumerate() {
        if let Some(o) = o {
            networks[i] = Some(NetUse {
                refused: o.refused,
                uses: give_back(o, &mut refunds[1 + i]),
            });
        }
    }
    (
        CountOutcome {
            admitted,
            refused: caller.refused,
            uses,
            networks,
        },
        refunds,
    )
}

/// Current use without counting (admin views).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub used: PerWindow<u32>,
    /// Milliseconds until each window frees capacity.
    pub reset_ms: PerWindow<u64>,
}

impl Usage {
    pub fn of(e: &Entry, now_ms: u64) -> Usage {
        let mut e = *e;
        Usage {
            used: PerWindow::from_fn(|k| e.counter(k).used(now_ms)),
            reset_ms: PerWindow::from_fn(|k| e.counter(k).reset_ms(now_ms)),
        }
    }

    /// An entry holding exactly these counts at `now_ms` (a dry run applies to it; the sliding
    /// window collapsed into the current slot, which is exact for "is there room now").
    pub fn entry(&self, now_ms: u64) -> Entry {
        let mut e = Entry::default();
        for (k, used) in self.used.iter() {
            e.counter(k).add(now_ms, *used);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = crate::model::window::HOUR_MS;

    fn id(n: u8) -> IdKey {
        IdKey::from_prefix(&[1, n, n, n, n, n, n, n, n, n])
    }

    fn limits(burst: u32, hourly: u32) -> PerWindow<Option<Limit>> {
        PerWindow::default()
            .with(WindowKind::Burst, Some(Limit::refusing(burst)))
            .with(WindowKind::Hourly, Some(Limit::refusing(hourly)))
    }

    /// Counting the holders apart, combining and giving back ends where counting them together
    /// does, request after request: the two ways a store may count agree.
    #[test]
    fn holders_counted_apart_and_combined_agree_with_counting_them_together() {
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut together = [Entry::default(); 3];
        let mut apart = [Entry::default(); 3];
        let mut gave_back = 0;
        for step in 0..5_000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let req = CountRequest {
                networks: [
                    Some(NetCount {
                        id: id(2),
                        limits: limits(40, 90),
                    }),
                    (!rng.is_multiple_of(3)).then_some(NetCount {
                        id: id(3),
                        limits: limits(60, 70),
                    }),
                ],
                ..CountRequest::new(
                    id(1),
                    1_000_000 + step * 700,
                    1 + (rng % 3) as u32,
                    limits(30, 50),
                )
            };
            let [c, n0, n1] = &mut together;
            let want = apply_all(c, [Some(n0), req.networks[1].map(|_| n1)], &req);

            let [c, n0, n1] = &mut apart;
            let caller = apply(c, &req);
            let a = apply(n0, &req.for_network(0).unwrap());
            let b = req.for_network(1).map(|r| apply(n1, &r));
            let (got, refunds) = combine(&req, caller, [Some(a), b]);
            assert_eq!(got, want, "step {step}");
            // Give back what the combined answer says was not spent (what refund.lua does).
            for (h, e) in apart.iter_mut().enumerate() {
                if refunds[h] {
                    gave_back += 1;
                    let idx = windows::index(req.now_ms, HOUR);
                    let used = e.hour.used_at(idx);
                    e.hour = Fixed::default();
                    e.hour.add(idx, used - req.cost);
                }
            }
            for h in 0..3 {
                assert_eq!(
                    Usage::of(&apart[h], req.now_ms),
                    Usage::of(&together[h], req.now_ms),
                    "holder {h} after step {step}"
                );
            }
        }
        assert!(gave_back > 100, "the case is exercised: {gave_back}");
    }
}
