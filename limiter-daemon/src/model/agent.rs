//! A signed agent's name: the URL of its key directory (Web Bot Auth). What a
//! `Signature-Agent` value or an operator's `[agents]` entry names, normalized once so the
//! same agent is the same identity whichever way it was written.

/// Where an agent's origin publishes its keys.
pub const WELL_KNOWN: &str = "/.well-known/http-message-signatures-directory";

/// `@authority` as RFC 9421 §2.2.3 writes it: the host lower-cased, a default port dropped.
pub fn normalize_authority(authority: &str, scheme: Option<&str>) -> String {
    let lower = authority.trim().to_ascii_lowercase();
    let default = match scheme {
        Some("http") => Some(":80"),
        Some("https") | None => Some(":443"),
        _ => None,
    };
    match default {
        Some(port) if lower.ends_with(port) && !lower.ends_with("]") => {
            lower[..lower.len() - port.len()].to_owned()
        }
        _ => lower,
    }
}

/// The directory URL `agent` names: an `https` origin gets the well-known path; an `https`
/// URL with a path is taken as the directory itself. Anything else (plain `http`, no host,
/// user info) names no directory.
pub fn directory_url(agent: &str) -> Option<String> {
    let uri: http::Uri = agent.trim().parse().ok()?;
    if uri.scheme_str() != Some("https") {
        return None;
    }
    let authority = uri.authority()?;
    if authority.as_str().contains('@') || authority.host().is_empty() {
        return None;
    }
    let host = normalize_authority(authority.as_str(), Some("https"));
    match uri.path_and_query().map(|p| p.as_str()) {
        None | Some("") | Some("/") => Some(format!("https://{host}{WELL_KNOWN}")),
        Some(path) => Some(format!("https://{host}{path}")),
    }
}

/// What became of a request's Web Bot Auth signature (set on a decision when one was
/// presented; `<ns>_agent_signatures_total{outcome}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentSignature {
    /// Verified with a key of the agent's directory: metered as the agent.
    Verified,
    /// Forged, expired, or otherwise refused: metered as the address, counted like a fake
    /// crawler.
    Invalid,
    /// Well formed, but not checkable yet or here (the directory is being fetched, is not
    /// allowed, or covers a part of the request this surface does not see): metered as what
    /// it otherwise is.
    Unverified,
    /// Verifies, but its nonce was seen within its life (a replay, or a retry not signed
    /// again): metered as what it otherwise is; the address is not refused for it.
    Replayed,
}

impl AgentSignature {
    pub const ALL: [AgentSignature; 4] = [
        AgentSignature::Verified,
        AgentSignature::Invalid,
        AgentSignature::Unverified,
        AgentSignature::Replayed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AgentSignature::Verified => "verified",
            AgentSignature::Invalid => "invalid",
            AgentSignature::Unverified => "unverified",
            AgentSignature::Replayed => "replayed",
        }
    }

    /// Position in [`AgentSignature::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_names_its_well_known_directory_and_only_https_names_one() {
        assert_eq!(
            directory_url("https://Agent.Example:443").as_deref(),
            Some("https://agent.example/.well-known/http-message-signatures-directory")
        );
        assert_eq!(
            directory_url("https://agent.example/keys.json").as_deref(),
            Some("https://agent.example/keys.json")
        );
        for bad in [
            "http://agent.example",
            "https://u@agent.example",
            "agent",
            "",
        ] {
            assert_eq!(directory_url(bad), None, "{bad}");
        }
        for (i, s) in AgentSignature::ALL.into_iter().enumerate() {
            assert_eq!(s.index(), i);
        }
    }
}
