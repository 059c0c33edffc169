//! `[[routes]]` and `[default_route]`: a path prefix (and optional methods) decides what a
//! request costs, which windows apply, what happens over the daily quota, and whether an API
//! key's own `hourly_limit` applies. Prefixes match the path as the upstream reads it
//! ([`request_path::normal`]), never the raw target: every surface's route is chosen here.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::LazyLock;

use serde::de::{self, EnumAccess, VariantAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::tiers::positive;
use super::ConfigError;
use crate::model::request_path;
use crate::model::{PerWindow, WindowKind, WINDOWS};

/// What happens when the daily quota is spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverQuota {
    /// 429 with `reason = daily`.
    Reject,
    /// Hold the request (soft, then hard delay) and let it proceed; never a 429.
    Delay,
}

impl OverQuota {
    pub fn as_str(self) -> &'static str {
        match self {
            OverQuota::Reject => "reject",
            OverQuota::Delay => "delay",
        }
    }
}

/// A window a route may opt into by name: a row of [`WINDOWS`] with `route_limit`, spelled as
/// its `name` (`"burst"`, `"hourly"`, `"daily"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitName(pub WindowKind);

/// The names `limits` accepts, in table order (serde wants them as a `'static` slice).
fn limit_names() -> &'static [&'static str] {
    static NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
        WINDOWS
            .iter()
            .filter(|(_, spec)| spec.route_limit)
            .map(|(_, spec)| spec.name)
            .collect()
    });
    &NAMES
}

impl LimitName {
    fn named(name: &str) -> Option<LimitName> {
        WINDOWS
            .iter()
            .find(|(_, spec)| spec.route_limit && spec.name == name)
            .map(|(kind, _)| LimitName(kind))
    }
}

// Deserialized as a unit-variant enum, as `#[derive(Deserialize)]` on an enum of the names
// would, so a wrong name reads "unknown variant `x`, expected one of `burst`, ..." as before.
impl<'de> Deserialize<'de> for LimitName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name(LimitName);
        struct NameVisitor;
        impl Visitor<'_> for NameVisitor {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("variant identifier")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Name, E> {
                let names = limit_names();
                usize::try_from(v)
                    .ok()
                    .and_then(|i| names.get(i))
                    .and_then(|n| LimitName::named(n))
                    .map(Name)
                    .ok_or_else(|| {
                        let expected = format!("variant index 0 <= i < {}", names.len());
                        E::invalid_value(de::Unexpected::Unsigned(v), &expected.as_str())
                    })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Name, E> {
                LimitName::named(v)
                    .map(Name)
                    .ok_or_else(|| E::unknown_variant(v, limit_names()))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Name, E> {
                self.visit_str(&String::from_utf8_lossy(v))
            }
        }
        impl<'de> Deserialize<'de> for Name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_identifier(NameVisitor)
            }
        }
        struct LimitVisitor;
        impl<'de> Visitor<'de> for LimitVisitor {
            type Value = LimitName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("enum LimitName")
            }
            fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<LimitName, A::Error> {
                let (Name(name), variant) = data.variant::<Name>()?;
                variant.unit_variant()?;
                Ok(name)
            }
        }
        d.deserialize_enum("LimitName", limit_names(), LimitVisitor)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub prefix: String,
    pub methods: Option<Vec<String>>,
    pub cost: Option<u32>,
    pub limits: Option<Vec<LimitName>>,
    pub over_quota: Option<OverQuota>,
    pub key_limit: Option<bool>,
    pub shadow: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDefaultRoute {
    pub cost: Option<u32>,
    pub limits: Option<Vec<LimitName>>,
    pub over_quota: Option<OverQuota>,
    pub key_limit: Option<bool>,
    pub shadow: Option<bool>,
}

/// Which windows count a route's requests: a flag per window of [`WINDOWS`], set only where the
/// row has `route_limit` (the key window follows the route's `key_limit` instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits(PerWindow<bool>);

impl Limits {
    /// Every window a route may name: what a route without `limits` counts in.
    pub fn all() -> Limits {
        Limits(WINDOWS.map(|_, spec| spec.route_limit))
    }

    fn from_names(names: &[LimitName]) -> Limits {
        Limits(PerWindow::from_fn(|kind| names.contains(&LimitName(kind))))
    }

    /// Whether `kind` counts this route's requests.
    pub fn applies(self, kind: WindowKind) -> bool {
        self.0[kind]
    }

    pub fn describe(self) -> String {
        let names: Vec<&str> = WindowKind::ALL
            .into_iter()
            .filter(|k| self.applies(*k))
            .map(WindowKind::as_str)
            .collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join("+")
        }
    }
}

/// A validated route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// `"/"`-anchored prefix, in [`request_path::normal`] form; `None` for the default route.
    pub prefix: Option<String>,
    /// Upper-case method names; `None` means any method.
    pub methods: Option<Vec<String>>,
    /// Units each request costs in the hourly, key and daily windows (burst counts requests).
    pub cost: NonZeroU32,
    pub limits: Limits,
    pub over_quota: OverQuota,
    /// Whether an API key's own `hourly_limit` applies here.
    pub key_limit: bool,
    /// Shadow mode on this route alone (`[engine] shadow` is every route).
    pub shadow: bool,
}

impl Route {
    fn matches(&self, method: &str, path: &str) -> bool {
        let Some(prefix) = &self.prefix else {
            return true;
        };
        if let Some(methods) = &self.methods {
            if !methods.iter().any(|m| m.eq_ignore_ascii_case(method)) {
                return false;
            }
        }
        // Match on a segment boundary so `/api/feeds` covers `/api/feeds/1` but not `/api/feedsx`.
        match path.strip_prefix(prefix.as_str()) {
            None => false,
            Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        }
    }
}

/// Routes, longest prefix first, plus the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteTable {
    pub routes: Vec<Route>,
    pub default: Route,
}

impl RouteTable {
    /// The most specific route for a request target, read as the upstream reads it: decoded,
    /// dot segments removed, the query string ignored ([`request_path::normal`]).
    pub fn matching(&self, method: &str, target: &str) -> &Route {
        let path = request_path::normal(target);
        self.routes
            .iter()
            .find(|r| r.matches(method, &path))
            .unwrap_or(&self.default)
    }

    pub fn validate(
        raw: Vec<RawRoute>,
        default: Option<RawDefaultRoute>,
    ) -> Result<Self, ConfigError> {
        let mut routes = Vec::with_capacity(raw.len());
        for (i, r) in raw.into_iter().enumerate() {
            let field = |name: &str| format!("routes[{i}].{name}");
            if !r.prefix.starts_with('/') {
                return Err(ConfigError::invalid(
                    field("prefix"),
                    format!("{:?} must start with '/'", r.prefix),
                ));
            }
            let methods = match r.methods {
                None => None,
                Some(ms) if ms.is_empty() => {
                    return Err(ConfigError::invalid(
                        field("methods"),
                        "an empty list matches nothing; leave it out to match every method",
                    ))
                }
                Some(ms) => {
                    let mut out = Vec::with_capacity(ms.len());
                    for m in ms {
                        if m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic()) {
                            return Err(ConfigError::invalid(
                                field("methods"),
                                format!("{m:?} is not an HTTP method"),
                            ));
                        }
                        out.push(m.to_ascii_uppercase());
                    }
                    Some(out)
                }
            };
            let rules = RawDefaultRoute {
                cost: r.cost,
                limits: r.limits,
                over_quota: r.over_quota,
                key_limit: r.key_limit,
                shadow: r.shadow,
            };
            // Compared with the normal form of each path, so written in it too (`/%7Eu` is `/~u`).
            let prefix = request_path::normal(&r.prefix).into_owned();
            routes.push(route(Some(prefix), methods, &field("cost"), rules)?);
        }
        // Longest prefix first; among equals, routes naming methods before catch-alls.
        routes.sort_by(|a, b| {
            let la = a.prefix.as_ref().map_or(0, String::len);
            let lb = b.prefix.as_ref().map_or(0, String::len);
            lb.cmp(&la)
                .then_with(|| b.methods.is_some().cmp(&a.methods.is_some()))
        });
        let default = route(
            None,
            None,
            "default_route.cost",
            default.unwrap_or_default(),
        )?;
        Ok(RouteTable { routes, default })
    }
}

/// A route from its match (`prefix`, `methods`) and its rules (what every route and the default
/// route share), with the defaults filled in; `cost_field` names the cost in errors.
fn route(
    prefix: Option<String>,
    methods: Option<Vec<String>>,
    cost_field: &str,
    rules: RawDefaultRoute,
) -> Result<Route, ConfigError> {
    Ok(Route {
        prefix,
        methods,
        cost: positive(cost_field, rules.cost, 1)?,
        limits: rules
            .limits
            .as_deref()
            .map(Limits::from_names)
            .unwrap_or_else(Limits::all),
        over_quota: rules.over_quota.unwrap_or(OverQuota::Reject),
        key_limit: rules.key_limit.unwrap_or(false),
        shadow: rules.shadow.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(toml_text: &str) -> RouteTable {
        #[derive(Deserialize)]
        struct W {
            routes: Vec<RawRoute>,
        }
        let w: W = toml::from_str(toml_text).unwrap();
        RouteTable::validate(w.routes, None).unwrap()
    }

    #[test]
    fn longest_prefix_on_segment_boundary_wins() {
        let t = table(
            "[[routes]]\nprefix = \"/api\"\ncost = 2\n[[routes]]\nprefix = \"/api/feeds\"\ncost = 3\n",
        );
        assert_eq!(t.matching("GET", "/api/feeds/1?x=1").cost.get(), 3);
        assert_eq!(t.matching("GET", "/api/feedsx").cost.get(), 2);
        assert_eq!(t.matching("GET", "/other").cost.get(), 1);
    }

    /// Each spelling is metered as the route nginx serves it as (`$uri` in nginx 1.22).
    #[test]
    fn routes_match_the_path_the_upstream_reads() {
        let t = table(
            "[[routes]]\nprefix = \"/reader\"\ncost = 10\n[[routes]]\nprefix = \"/healthz\"\ncost = 2\n\
             [[routes]]\nprefix = \"/%7Euser\"\ncost = 3\n",
        );
        for (path, cost) in [
            ("/reader", 10),
            ("/healthz/../reader", 10),
            ("/healthz/%2e%2e/reader", 10),
            ("/healthz/%2E%2E/reader", 10),
            ("/x/../reader", 10),
            ("/./reader", 10),
            ("//reader", 10),
            ("/healthz/..%2freader", 10),
            ("/healthz%2f..%2freader", 10),
            ("/%72eader", 10),
            ("/reader/..", 1),
            ("/reader%2F..", 1),
            ("/healthz/..;/reader", 2),
            ("/healthz/%252e%252e/reader", 2),
            ("/~user/x", 3),
            ("/%7euser", 3),
        ] {
            assert_eq!(t.matching("GET", path).cost.get(), cost, "{path}");
        }
    }

    #[test]
    fn methods_filter() {
        let t = table("[[routes]]\nprefix = \"/scan\"\nmethods = [\"post\"]\ncost = 5\n");
        assert_eq!(t.matching("POST", "/scan").cost.get(), 5);
        assert_eq!(t.matching("GET", "/scan").cost.get(), 1);
    }

    #[test]
    fn bad_prefix_names_the_field() {
        #[derive(Deserialize)]
        struct W {
            routes: Vec<RawRoute>,
        }
        let w: W = toml::from_str("[[routes]]\nprefix = \"scan\"\n").unwrap();
        let err = RouteTable::validate(w.routes, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("routes[0].prefix"), "{err}");
    }

    #[test]
    fn limits_name_the_windows_of_the_table_and_refuse_others_as_before() {
        let t = table("[[routes]]\nprefix = \"/a\"\nlimits = [\"daily\", \"burst\"]\n");
        let l = t.matching("GET", "/a").limits;
        assert_eq!(
            WindowKind::ALL.map(|k| l.applies(k)),
            [true, false, true, false]
        );
        assert_eq!(l.describe(), "burst+daily");
        assert_eq!(t.default.limits.describe(), "burst+hourly+daily");
        #[derive(Debug, Deserialize)]
        struct W {
            #[allow(dead_code)]
            limits: Vec<LimitName>,
        }
        let expected = "expected one of `burst`, `hourly`, `daily`";
        for (list, want) in [
            (
                "[\"weekly\"]",
                format!("unknown variant `weekly`, {expected}"),
            ),
            (
                "[\"key_hourly\"]",
                format!("unknown variant `key_hourly`, {expected}"),
            ),
            ("[1]", "wanted string or table".to_string()),
            (
                "\"burst\"",
                "invalid type: string \"burst\", expected a sequence".to_string(),
            ),
        ] {
            let err = toml::from_str::<W>(&format!("limits = {list}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(&want), "{list}: {err}");
        }
    }
}
