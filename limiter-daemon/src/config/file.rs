//! The whole file: [`RawConfig`] as written (every section optional, unknown fields refused) and
//! [`Config`], the validated configuration; loading, parsing (old keys moved to their new names
//! first, [`super::renamed`]), the environment applied over the file, and the line added to a
//! field error. Each section validates itself in its own file.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::admin::AdminSettings;
use super::agents::AgentSettings;
use super::crawlers::CrawlerSettings;
use super::engine::EngineSettings;
use super::env::EnvMap;
use super::error::ConfigError;
use super::http::HttpSettings;
use super::identity::IdentitySettings;
use super::jwt::JwtSettings;
use super::kernel::KernelSettings;
use super::keys::KeySettings;
use super::lockout::LockoutSettings;
use super::networks::NetworkSettings;
use super::routes::RouteTable;
use super::store::StoreSettings;
use super::tiers::{QuotaSettings, TierTable};
use super::upgrade::UpgradePaths;
use super::{
    admin, agents, crawlers, engine, field_path, http, identity, jwt, kernel, keys, locate,
    lockout, log, metrics, networks, renamed, routes, store, tiers, upgrade,
};

/// The file as written: every section optional, unknown fields refused.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub engine: engine::RawEngine,
    #[serde(default)]
    pub tiers: tiers::RawTiers,
    #[serde(default)]
    pub routes: Vec<routes::RawRoute>,
    pub default_route: Option<routes::RawDefaultRoute>,
    #[serde(default)]
    pub identity: identity::RawIdentity,
    #[serde(default)]
    pub crawlers: crawlers::RawCrawlers,
    #[serde(default)]
    pub agents: agents::RawAgents,
    pub jwt: Option<jwt::RawJwt>,
    #[serde(default)]
    pub keys: keys::RawKeys,
    #[serde(default)]
    pub lockout: lockout::RawLockout,
    #[serde(default)]
    pub store: store::RawStore,
    #[serde(default)]
    pub upgrade: upgrade::RawUpgrade,
    #[serde(default)]
    pub kernel: kernel::RawKernel,
    #[serde(default)]
    pub metrics: metrics::RawMetrics,
    #[serde(default)]
    pub http: http::RawHttp,
    #[serde(default)]
    pub admin: admin::RawAdmin,
    #[serde(default)]
    pub log: log::RawLog,
    #[serde(default)]
    pub networks: networks::RawNetworks,
    #[serde(default)]
    pub overload: super::overload::RawOverload,
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// `[engine]`: shadow mode for everything.
    pub engine: EngineSettings,
    pub tiers: TierTable,
    pub quota: QuotaSettings,
    pub routes: RouteTable,
    pub identity: IdentitySettings,
    /// `[crawlers]`: how search engines and archives prove they are one.
    pub crawlers: CrawlerSettings,
    /// `[agents]`: which signed agents are verified, and their own budgets.
    pub agents: AgentSettings,
    /// `None`: bearer JWTs are not recognised (callers stay anonymous).
    pub jwt: Option<JwtSettings>,
    pub keys: KeySettings,
    pub lockout: LockoutSettings,
    /// `[networks]`: the network budgets anonymous and session callers also count against.
    pub networks: NetworkSettings,
    pub store: StoreSettings,
    pub upgrade: UpgradePaths,
    pub kernel: KernelSettings,
    /// The operator listener (`/metrics`, `/healthz`, `/readyz`).
    pub metrics: metrics::MetricsSettings,
    /// The HTTP surfaces: listeners, upstream, timeouts, bounds on held requests.
    pub http: HttpSettings,
    /// The admin API's listener and token source.
    pub admin: AdminSettings,
    /// How log lines are written (`--log-format` wins).
    pub log: log::LogSettings,
    /// Environment variables that overrode the file, with their values.
    pub env_applied: Vec<(&'static str, u32)>,
}

impl Default for Config {
    fn default() -> Self {
        Config::from_raw(RawConfig::default(), &EnvMap::new()).expect("defaults are valid")
    }
}

impl Config {
    /// Reads, parses, applies `env` and validates `path`.
    pub fn load(path: &Path, env: &EnvMap) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml_str(&text, path, env)
    }

    /// Parses `text` (named `path` in errors), applies `env`, validates. Old keys are read as
    /// their new names, with a warning logged for each.
    pub fn from_toml_str(text: &str, path: &Path, env: &EnvMap) -> Result<Self, ConfigError> {
        // Through `serde_path_to_error`, so a value of the wrong type (`burst = "lots"`) or an
        // unknown key names its field as a validation error does, not only its line.
        let parse_error = |e: serde_path_to_error::Error<toml::de::Error>| {
            let field = field_path::field_of(&e.path().to_string(), e.inner().message());
            let e = e.into_inner();
            ConfigError::Parse {
                path: path.to_path_buf(),
                line: e
                    .span()
                    .map(|s| line_at(text, s.start))
                    .or_else(|| field.as_deref().and_then(|f| locate::line_of(text, f))),
                field,
                message: e.message().to_string(),
            }
        };
        let mut file: toml::Table =
            serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(parse_error)?;
        let old = renamed::migrate(&mut file).map_err(|e| locate_error(e, text, path, &[]))?;
        for w in &old.warnings {
            tracing::warn!(event = "config_key_renamed", path = %path.display(), "{w}");
        }
        // An untouched file is read from its text, so that errors keep their exact position.
        let mut raw: RawConfig = if old.warnings.is_empty() {
            serde_path_to_error::deserialize(toml::Deserializer::new(text))
        } else {
            serde_path_to_error::deserialize(toml::Value::Table(file))
        }
        .map_err(parse_error)?;
        raw.tiers.session_multiplier = old.session_multiplier;
        Config::from_raw(raw, env).map_err(|err| locate_error(err, text, path, &old.moved))
    }

    /// Validates an already-parsed file with `env` applied over it.
    pub fn from_raw(mut raw: RawConfig, env: &EnvMap) -> Result<Self, ConfigError> {
        let mut env_applied = Vec::new();
        TierTable::apply_env(&mut raw.tiers, env, &mut env_applied)?;
        let mut token_daily = raw.jwt.as_ref().and_then(|j| j.daily);
        if let Some(v) = super::env::read_u32(env, "QUOTA_TOKEN", false)? {
            token_daily = Some(v);
            env_applied.push(("QUOTA_TOKEN", v));
        }
        let identity = IdentitySettings::validate(raw.identity)?;
        let proxy_protocol_peers = identity.trusted_proxies.clone();
        let client_ipv6_prefix = identity.ipv6_prefix;
        let kernel = KernelSettings::validate(raw.kernel, identity.ipv6_prefix)?;
        let tiers = TierTable::validate(&raw.tiers)?;
        let networks = NetworkSettings::validate(raw.networks, &tiers)?;
        let upgrade = UpgradePaths::validate(raw.upgrade, &tiers)?;
        Ok(Config {
            engine: EngineSettings::validate(raw.engine),
            tiers,
            quota: QuotaSettings::validate(&raw.tiers, token_daily)?,
            routes: RouteTable::validate(raw.routes, raw.default_route)?,
            identity,
            crawlers: CrawlerSettings::validate(raw.crawlers)?,
            agents: AgentSettings::validate(raw.agents)?,
            jwt: raw.jwt.map(JwtSettings::validate).transpose()?,
            keys: KeySettings::validate(raw.keys)?,
            lockout: LockoutSettings::validate(raw.lockout)?,
            networks,
            store: StoreSettings::validate(raw.store)?,
            upgrade,
            kernel,
            metrics: metrics::MetricsSettings::validate(raw.metrics)?,
            http: {
                let mut h = HttpSettings::validate(raw.http)?;
                h.proxy_protocol_peers = proxy_protocol_peers;
                h.client_ipv6_prefix = client_ipv6_prefix;
                h.overload = super::overload::OverloadSettings::validate(raw.overload)?;
                h
            },
            admin: AdminSettings::validate(raw.admin)?,
            log: log::LogSettings::validate(raw.log)?,
            env_applied,
        })
    }

    /// Defaults, with the state directory set (tests and benches).
    pub fn with_state_dir(dir: impl Into<PathBuf>) -> Self {
        let mut c = Config::default();
        c.store.state_dir = dir.into();
        c
    }
}

fn line_at(text: &str, offset: usize) -> usize {
    text.get(..offset).map_or(0, |t| t.matches('\n').count()) + 1
}

/// Adds the line to a field error when the field can be found in the text (a key `moved` from
/// an old name: where the old name is written).
fn locate_error(err: ConfigError, text: &str, path: &Path, moved: &[(&str, &str)]) -> ConfigError {
    match err {
        ConfigError::Invalid { field, message } => {
            match locate::line_of(text, &field).or_else(|| {
                let old = moved.iter().find(|(_, new)| *new == field)?.0;
                locate::line_of(text, old)
            }) {
                Some(line) => ConfigError::InvalidAt {
                    path: path.to_path_buf(),
                    line,
                    field,
                    message,
                },
                None => ConfigError::Invalid { field, message },
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env: EnvMap = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_toml_str(text, Path::new("test.toml"), &env)
    }

    #[test]
    fn defaults_match_the_ladder() {
        let c = parse("", &[]).unwrap();
        assert_eq!(c.tiers.anon.burst.get(), 120);
        assert_eq!(c.tiers.anon.hourly.get(), 600);
        assert_eq!(c.tiers.session.burst.get(), 300);
        assert_eq!(c.tiers.session.hourly.get(), 6_000);
        assert_eq!(c.tiers.sponsor.burst.get(), 2_000);
        assert_eq!(c.tiers.sponsor.hourly.get(), 120_000);
        assert_eq!(c.tiers.anon.daily.unwrap().get(), 1_000);
        assert_eq!(c.quota.token.get(), 10_000);
        assert_eq!(
            c.tiers.session.daily, c.tiers.anon.daily,
            "a cookie is forgeable"
        );
        assert_eq!(c.quota.warn_threshold, 200);
        assert_eq!(c.quota.soft_window, 30);
        assert_eq!(c.keys.prefix, "rsa");
        assert_eq!(c.keys.default_hourly_limit.get(), 5_000);
        // The crawler rung: like session unless set.
        assert_eq!(c.tiers.crawler.burst.get(), 300);
        assert_eq!(c.tiers.crawler.hourly.get(), 6_000);
        assert_eq!(c.tiers.crawler.daily, c.tiers.anon.daily);
    }

    #[test]
    fn the_crawler_rung_is_set_in_the_file_and_the_environment_wins() {
        let c = parse(
            "[tiers.crawler]\nburst = 50\nhourly = 900\ndaily = 4000\n",
            &[("TIER_CRAWLER_BURST", "60")],
        )
        .unwrap();
        assert_eq!(c.tiers.crawler.burst.get(), 60);
        assert_eq!(c.tiers.crawler.hourly.get(), 900);
        assert_eq!(c.tiers.crawler.daily.unwrap().get(), 4_000);
        let c = parse(
            "",
            &[("TIER_CRAWLER_HOURLY", "70"), ("QUOTA_CRAWLER", "80")],
        )
        .unwrap();
        assert_eq!(c.tiers.crawler.hourly.get(), 70);
        assert_eq!(c.tiers.crawler.daily.unwrap().get(), 80);
        let err = parse("[quota]\nanon = 5\n[tiers.crawler]\ndaily = 0\n", &[]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::InvalidAt { line: 4, field, .. } if field == "tiers.crawler.daily"),
            "{err}"
        );
    }

    #[test]
    fn the_old_quota_section_loads_as_the_tier_tables_say() {
        let jwt = "[jwt]\nalgorithm = \"HS256\"\nsecret = \"0123456789abcdef0\"\n";
        let old = parse(
            &format!(
                "[tiers.session]\nmultiplier = 4\n[quota]\nanon = 50\nsponsor = 900\n\
                 token = 70\nsoft_delay_ms = 10\nhard_delay_ms = 20\n{jwt}"
            ),
            &[],
        )
        .unwrap();
        let new = parse(
            &format!(
                "[tiers]\nsoft_delay_ms = 10\nhard_delay_ms = 20\n[tiers.anon]\ndaily = 50\n\
                 [tiers.session]\nhourly = 2400\n[tiers.sponsor]\ndaily = 900\n{jwt}daily = 70\n"
            ),
            &[],
        )
        .unwrap();
        assert_eq!((&old.tiers, &old.quota), (&new.tiers, &new.quota));
        assert_eq!(new.tiers.sponsor.daily.map(|v| v.get()), Some(900));
        assert_eq!(new.tiers.session.hourly.get(), 2400);
        // An error about a moved key is found where the old name is written.
        let err = parse("\n[quota]\nanon = 0\n", &[]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::InvalidAt { line: 3, field, .. } if field == "tiers.anon.daily"),
            "{err}"
        );
    }

    #[test]
    fn each_rung_has_one_environment_name_and_the_seeds_are_aliases() {
        let c = parse(
            "[tiers.session]\nhourly = 5000\n",
            &[("TIER_ANON_HOURLY", "70"), ("TIER_AUTH_MULTIPLIER", "3")],
        )
        .unwrap();
        assert_eq!(c.tiers.session.hourly.get(), 210, "the environment wins");
        let c = parse(
            "",
            &[("TIER_SESSION_HOURLY", "90"), ("TIER_ANON_DAILY", "9")],
        )
        .unwrap();
        assert_eq!(
            (
                c.tiers.session.hourly.get(),
                c.tiers.session.daily.unwrap().get()
            ),
            (90, 9)
        );
        let err = parse("", &[("TIER_ANON_BURST", "5"), ("TIER_FREE_BURST", "6")]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Env { var, message } if var == "TIER_FREE_BURST" && message.contains("TIER_ANON_BURST")),
            "{err}"
        );
    }

    #[test]
    fn a_broken_range_file_is_a_config_error_with_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bingbot.json");
        std::fs::write(&f, r#"{"prefixes":[{"ipv4Prefix":"157.55.39.0/33"}]}"#).unwrap();
        let text = format!(
            "[quota]\nanon = 5\n\n[crawlers]\nrange_files = [{:?}]\n",
            f.display().to_string()
        );
        let err = parse(&text, &[]).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(&err, ConfigError::InvalidAt { line: 5, field, .. } if field == "crawlers.range_files"),
            "{msg}"
        );
        assert!(
            msg.contains("bingbot.json") && msg.contains("prefixes[0]"),
            "{msg}"
        );
    }

    #[test]
    fn env_wins_over_file() {
        let c = parse(
            "[tiers.anon]\nhourly = 50\n",
            &[("TIER_FREE_HOURLY", "70"), ("TIER_AUTH_MULTIPLIER", "3")],
        )
        .unwrap();
        assert_eq!(c.tiers.anon.hourly.get(), 70);
        assert_eq!(c.tiers.session.hourly.get(), 210);
        assert_eq!(c.env_applied.len(), 2);
    }

    #[test]
    fn malformed_env_names_the_variable() {
        let err = parse("", &[("TIER_SPONSOR_BURST", "2k")]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Env { var, .. } if var == "TIER_SPONSOR_BURST"),
            "{err}"
        );
    }

    #[test]
    fn unknown_field_gives_the_line() {
        let err = parse("[tiers.anon]\nburst = 10\nbursts = 3\n", &[]).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, ConfigError::Parse { line: Some(3), .. }),
            "{text}"
        );
        assert!(text.contains("bursts"), "{text}");
    }

    /// A value of the wrong type was a parse error with a line and no field, so a reload
    /// refusal said `"field": "config"`.
    #[test]
    fn a_value_of_the_wrong_type_or_an_unknown_key_names_its_field() {
        let err = parse("[quota]\nanon = 5\n[tiers.anon]\nburst = \"lots\"\n", &[]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Parse { line: Some(4), field: Some(f), .. } if f == "tiers.anon.burst"),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("field `tiers.anon.burst`"),
            "{err}"
        );
        let err = parse("[[routes]]\nprefix = \"/a\"\n[[routes]]\nprefix = 7\n", &[]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Parse { field: Some(f), .. } if f == "routes[1].prefix"),
            "{err:?}"
        );
        let err = parse("[tiers.anon]\nbursts = 3\n", &[]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Parse { field: Some(f), .. } if f == "tiers.anon.bursts"),
            "{err:?}"
        );
        // A syntax error is about no field.
        let err = parse("[tiers.anon\n", &[]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Parse { field: None, .. }),
            "{err:?}"
        );
    }

    /// Through humantime `cap = "1M"` was a month; config durations take `ms s m h d w` only.
    #[test]
    fn a_month_or_a_long_unit_name_is_not_a_config_duration() {
        for bad in ["1M", "2y", "5min", "1 hour"] {
            let err = parse(&format!("[lockout]\ncap = \"{bad}\"\n"), &[]).unwrap_err();
            assert!(
                matches!(&err, ConfigError::InvalidAt { line: 2, field, .. } if field == "lockout.cap"),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains(bad), "{err}");
        }
        let c = parse(
            "[lockout]\ncap = \"2w\"\n[store]\nsnapshot_interval = \"1s500ms\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.lockout.cap, std::time::Duration::from_secs(14 * 86_400));
        assert_eq!(
            c.store.snapshot_interval,
            std::time::Duration::from_millis(1500)
        );
    }

    #[test]
    fn invalid_value_names_field_and_line() {
        let err = parse("[quota]\nanon = 5\n\n[tiers.session]\nburst = 0\n", &[]).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, ConfigError::InvalidAt { line: 5, .. }),
            "{text}"
        );
        assert!(text.contains("tiers.session.burst"), "{text}");
    }

    #[test]
    fn valkey_backend_needs_an_address() {
        let err = parse("[store]\nbackend = \"valkey\"\n", &[]).unwrap_err();
        assert!(err.to_string().contains("store.valkey_address"), "{err}");
        let c = parse(
            "[store]\nbackend = \"valkey\"\nvalkey_address = \"127.0.0.1:6379\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.store.key_prefix, "limiter:");
        let err = parse("[store]\nvalkey_address = \"127.0.0.1:6379\"\n", &[]).unwrap_err();
        assert!(err.to_string().contains("store.valkey_address"), "{err}");
    }

    #[test]
    fn http_section_is_validated_with_the_rest() {
        let c = parse("[http]\napi_listen = [\"127.0.0.1:8081\"]\n", &[]).unwrap();
        assert_eq!(c.http.api_listen, ["127.0.0.1:8081".parse().unwrap()]);
        let err = parse("[http]\n[http.admin]\ntoken = \"x\"\n", &[]).unwrap_err();
        assert!(
            err.to_string().contains("`http.admin`") && err.to_string().contains("[admin]"),
            "{err}"
        );
        let err = parse("[quota]\nanon = 5\n\n[http]\nmax_held = 0\n", &[]).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, ConfigError::InvalidAt { line: 5, .. }),
            "{text}"
        );
        assert!(text.contains("http.max_held"), "{text}");
        let err = parse("[http]\nlisten = \"127.0.0.1:8080\"\n", &[]).unwrap_err();
        assert!(
            matches!(err, ConfigError::Parse { line: Some(2), .. }),
            "{err}"
        );
    }
}
