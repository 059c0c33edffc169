//! The tier ladder's rungs: who a caller is metered as (anonymous, signed in, a verified
//! crawler, a verified signed agent, sponsor).

/// A rung of the tier ladder. The order is the ladder's: a caller holding two proofs is
/// metered as the higher rung (`max`).
///
/// `Crawler` sits between session and sponsor: a search engine or archive proven by its
/// published ranges or forward-confirmed reverse DNS. The proof is about the address, so it
/// buys more than a forgeable cookie; a verified API key (sponsor) still wins over it.
///
/// `Agent` sits above crawler and below sponsor: an agent that signs its requests (Web Bot
/// Auth) with a key from its own directory is proven by cryptography, not by the address it
/// calls from, and is metered as itself wherever it calls from; but nobody here issued it
/// anything, so an API key still wins over it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Anon,
    Session,
    Crawler,
    Agent,
    Sponsor,
}

impl Tier {
    /// Every rung, in ladder order; [`Tier::index`] is the position in it (metrics tables,
    /// the operator page's tier mix).
    pub const ALL: [Tier; 5] = [
        Tier::Anon,
        Tier::Session,
        Tier::Crawler,
        Tier::Agent,
        Tier::Sponsor,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Anon => "anon",
            Tier::Session => "session",
            Tier::Crawler => "crawler",
            Tier::Agent => "agent",
            Tier::Sponsor => "sponsor",
        }
    }

    /// The rung's name as the config and the admin API write it.
    pub fn parse(s: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// Position in [`Tier::ALL`].
    pub fn index(self) -> usize {
        match self {
            Tier::Anon => 0,
            Tier::Session => 1,
            Tier::Crawler => 2,
            Tier::Agent => 3,
            Tier::Sponsor => 4,
        }
    }

    /// The rung a 429's upgrade hint names; `None` at the top. A crawler is not sent to sign
    /// in (a search engine has no account): its way up is an API key, like a session's; so is
    /// a signed agent's.
    pub fn next(self) -> Option<Tier> {
        match self {
            Tier::Anon => Some(Tier::Session),
            Tier::Session | Tier::Crawler | Tier::Agent => Some(Tier::Sponsor),
            Tier::Sponsor => None,
        }
    }

    /// One rung down among credentials (how an unverified API key is metered). The crawler
    /// rung is a proof about an address, not a credential a key can buy, so sponsor's rung
    /// below stays session, and a crawler's is session; so is a signed agent's (a proof too).
    pub fn below(self) -> Tier {
        match self {
            Tier::Sponsor | Tier::Crawler | Tier::Agent => Tier::Session,
            Tier::Session | Tier::Anon => Tier::Anon,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_ladder_order_and_index_is_the_position() {
        for (i, t) in Tier::ALL.into_iter().enumerate() {
            assert_eq!(t.index(), i);
            assert_eq!(Tier::parse(t.as_str()), Some(t));
        }
        assert!(Tier::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Tier::parse("googlebot"), None);
    }

    #[test]
    fn a_crawler_is_pointed_at_an_api_key_never_at_sign_in() {
        assert_eq!(Tier::Crawler.next(), Some(Tier::Sponsor));
        assert_eq!(Tier::Anon.next(), Some(Tier::Session));
        assert!(Tier::Crawler > Tier::Session && Tier::Crawler < Tier::Sponsor);
    }

    #[test]
    fn a_signed_agent_sits_below_sponsor_and_is_pointed_at_an_api_key() {
        assert!(Tier::Agent > Tier::Crawler && Tier::Agent < Tier::Sponsor);
        assert_eq!(Tier::Agent.next(), Some(Tier::Sponsor));
        assert_eq!(Tier::parse("agent"), Some(Tier::Agent));
    }
}
