//! Where limiterctl sends requests and with which token: `--url`/`--token`, else
//! `LIMITER_ADMIN_URL`/`LIMITER_ADMIN_TOKEN` (clap reads both), else the local config's
//! `[admin] listen` and its token file or `<state_dir>/admin-token`.
//!
//! limiterctl reads only what it needs from the config (`[admin]` and `[store] state_dir`, which
//! only a restart changes in the running daemon): a config being edited may fail validation
//! anywhere, and the operator then runs `limiterctl reload` to hear the daemon's refusal with
//! field and line. That holds for a TOML syntax error too: each of the two sections is then
//! read on its own, and one that does not parse either counts as absent (the defaults: the
//! loopback listener and the default state directory's token).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use limiter_common::admin_section::{
    AdminSettings, RawAdmin, DEFAULT_STATE_DIR, GENERATED_TOKEN_FILE,
};

use super::args::Conn;

#[derive(Clone, Debug)]
pub struct Target {
    /// Base URL without a trailing `/`.
    pub url: String,
    pub token: String,
}

/// What limiterctl takes from the local config.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Local {
    listen: Option<SocketAddr>,
    token_file: PathBuf,
}

impl Local {
    /// `[admin]` and `[store] state_dir` alone, from a file that need not validate elsewhere,
    /// nor even parse as TOML.
    fn lenient(path: &Path) -> anyhow::Result<Local> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        let (admin, store) = match text.parse::<toml::Table>() {
            Ok(mut t) => (t.remove("admin"), t.remove("store")),
            Err(_) => (section(&text, "admin"), section(&text, "store")),
        };
        let raw: RawAdmin = match admin {
            Some(v) => v.try_into()?,
            None => RawAdmin::default(),
        };
        let admin = AdminSettings::validate(raw)?;
        let state_dir = store
            .as_ref()
            .and_then(|s| s.get("state_dir"))
            .and_then(toml::Value::as_str)
            .unwrap_or(DEFAULT_STATE_DIR);
        Ok(Local {
            listen: admin.listen,
            token_file: admin
                .token_file
                .unwrap_or_else(|| Path::new(state_dir).join(GENERATED_TOKEN_FILE)),
        })
    }

    fn load(path: &Path) -> anyhow::Result<Local> {
        Local::lenient(path).with_context(|| {
            format!(
                "no --url/--token (or LIMITER_ADMIN_URL/LIMITER_ADMIN_TOKEN) and the config {} cannot be used",
                path.display()
            )
        })
    }
}

/// The body of the `[name]` table of a file that does not parse as a whole, parsed on its own;
/// `None` when the file has no such header or the body does not parse either. Best effort: a
/// line starting with `[` inside a multi-line string would end the section early.
fn section(text: &str, name: &str) -> Option<toml::Value> {
    let mut body = String::new();
    let (mut inside, mut found) = (false, false);
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            let header = t
                .strip_prefix('[')
                .filter(|h| !h.starts_with('['))
                .and_then(|h| h.split(']').next())
                .map(str::trim);
            inside = header == Some(name);
            found |= inside;
            continue;
        }
        if inside {
            body.push_str(line);
            body.push('\n');
        }
    }
    if !found {
        return None;
    }
    body.parse::<toml::Table>().ok().map(toml::Value::Table)
}

pub fn resolve(conn: &Conn) -> anyhow::Result<Target> {
    let mut loaded: Option<Local> = None;
    let mut local = || -> anyhow::Result<Local> {
        if let Some(l) = &loaded {
            return Ok(l.clone());
        }
        Ok(loaded.insert(Local::load(&conn.config)?).clone())
    };
    let url = match &conn.url {
        Some(u) => u.trim_end_matches('/').to_string(),
        None => {
            let addr = local()?
                .listen
                .context("the config turns the admin API off (admin.listen = \"\")")?;
            format!("http://{addr}")
        }
    };
    let token = match &conn.token {
        Some(t) => t.trim().to_string(),
        None => {
            let path = local()?.token_file;
            std::fs::read_to_string(&path)
                .with_context(|| format!("reading the admin token from {}", path.display()))?
                .trim()
                .to_string()
        }
    };
    Ok(Target { url, token })
}

#[cfg(test)]
mod tests {
    use limiter_common::admin_section::DEFAULT_LISTEN;

    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("limiter.toml");
        std::fs::write(&p, text).unwrap();
        (dir, p)
    }

    #[test]
    fn a_config_broken_elsewhere_still_names_the_admin_listener_and_token() {
        let (_d, p) = write(
            "[admin]\nlisten = \"127.0.0.1:9999\"\n[store]\nstate_dir = \"/srv/lim\"\n[tiers.anon]\nburst = \"x\"\n",
        );
        let l = Local::load(&p).unwrap();
        assert_eq!(l.listen, Some("127.0.0.1:9999".parse().unwrap()));
        assert_eq!(l.token_file, Path::new("/srv/lim/admin-token"));
    }

    #[test]
    fn a_valid_config_names_its_listener_and_token_as_the_daemon_reads_them() {
        let (_d, p) = write("[admin]\ntoken_file = \"/etc/t\"\n[store]\nstate_dir = \"/srv/x\"\n");
        let l = Local::load(&p).unwrap();
        assert_eq!(l.listen, Some(DEFAULT_LISTEN.parse().unwrap()));
        assert_eq!(l.token_file, Path::new("/etc/t"));
        let (_d, p) = write("");
        let l = Local::load(&p).unwrap();
        assert_eq!(
            l.token_file,
            Path::new(DEFAULT_STATE_DIR).join(GENERATED_TOKEN_FILE)
        );
    }

    /// A TOML syntax error anywhere made limiterctl exit 3 without trying the daemon.
    #[test]
    fn a_toml_syntax_error_elsewhere_still_names_the_admin_listener_and_token() {
        let (_d, p) = write(
            "[admin]\nlisten = \"127.0.0.1:9999\"\n\n[store]\nstate_dir = \"/srv/lim\"\n[tiers.anon\nburst = 2\n",
        );
        let l = Local::load(&p).unwrap();
        assert_eq!(l.listen, Some("127.0.0.1:9999".parse().unwrap()));
        assert_eq!(l.token_file, Path::new("/srv/lim/admin-token"));
    }

    #[test]
    fn a_file_that_parses_nowhere_uses_the_defaults() {
        let (_d, p) = write("[admin\nlisten = \n");
        let l = Local::load(&p).unwrap();
        assert_eq!(l.listen, Some(DEFAULT_LISTEN.parse().unwrap()));
        assert_eq!(
            l.token_file,
            Path::new(DEFAULT_STATE_DIR).join(GENERATED_TOKEN_FILE)
        );
        // A broken [admin] beside a readable [store]: the listener's default, the state dir read.
        let (_d, p) = write("[admin]\nlisten = \n[store]\nstate_dir = \"/srv/y\"\n");
        let l = Local::load(&p).unwrap();
        assert_eq!(l.token_file, Path::new("/srv/y/admin-token"));
    }

    #[test]
    fn an_admin_section_that_parses_but_does_not_validate_is_still_an_error() {
        let (_d, p) = write("[admin]\nlisten = \"nowhere\"\n");
        let err = format!("{:#}", Local::load(&p).unwrap_err());
        assert!(err.contains("cannot be used"), "{err}");
        assert!(err.contains("admin.listen"), "{err}");
    }
}
