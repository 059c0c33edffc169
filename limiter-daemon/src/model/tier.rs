//! The tier ladder's rungs: who a caller is metered as (anonymous, signed in, sponsor).

/// A rung of the tier ladder.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Anon,
    Session,
    Sponsor,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Anon => "anon",
            Tier::Session => "session",
            Tier::Sponsor => "sponsor",
        }
    }
    /// The rung above, named in a 429's upgrade hint; `None` at the top.
    pub fn next(self) -> Option<Tier> {
        match self {
            Tier::Anon => Some(Tier::Session),
            Tier::Session => Some(Tier::Sponsor),
            Tier::Sponsor => None,
        }
    }
    /// One rung down (how an unverified API key is metered).
    pub fn below(self) -> Tier {
        match self {
            Tier::Sponsor => Tier::Session,
            Tier::Session | Tier::Anon => Tier::Anon,
        }
    }
}
