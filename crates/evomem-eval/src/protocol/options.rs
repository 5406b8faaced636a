//! Protocol options: which protocol, how negatives are drawn, how fixed
//! candidate lists are used, which users get a decision, and which split is
//! the target. Each parses from its command-line word and names the flag in
//! its error.

use crate::error::EvalError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Which protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolKind {
    /// Memory built from pre-target history in one pass, then all decisions.
    #[default]
    Retrospective,
    /// One global chronological replay; decisions at their own time.
    Evolving,
}

impl FromStr for ProtocolKind {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "retrospective" => Ok(Self::Retrospective),
            "evolving" => Ok(Self::Evolving),
            other => Err(config_err(
                "protocol",
                format!("`{other}` (expected retrospective or evolving)"),
            )),
        }
    }
}

/// How negatives are drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampling {
    /// Uniformly from items the user never touched.
    #[default]
    Uniform,
    /// Proportionally to training popularity (non-test interaction counts).
    Popularity,
}

impl FromStr for Sampling {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "uniform" => Ok(Self::Uniform),
            "popularity" | "pop" => Ok(Self::Popularity),
            other => Err(config_err(
                "sampling",
                format!("`{other}` (expected uniform or popularity)"),
            )),
        }
    }
}

/// How fixed candidate lists from the source are used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FixedCandidates {
    /// The whole list (plus the target).
    #[default]
    AsGiven,
    /// The first `negatives` negatives of the list (plus the target).
    FirstN,
}

impl FromStr for FixedCandidates {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "as-given" | "as_given" => Ok(Self::AsGiven),
            "first-n" | "first_n" => Ok(Self::FirstN),
            other => Err(config_err(
                "fixed_candidates",
                format!("`{other}` (expected as-given or first-n)"),
            )),
        }
    }
}

/// Which users get decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum UserSelection {
    /// Everyone with a decision.
    #[default]
    All,
    /// `N` users chosen with the run seed.
    Count(usize),
    /// MARS *active*: 100 users with 50–200 interactions, seed 42.
    Active,
    /// MARS *light*: 100 users with 10–30 interactions, seed 64.
    Light,
}

impl UserSelection {
    /// `(min interactions, max interactions, seed, count)` of a named subsample.
    pub fn named_rule(self) -> Option<(usize, usize, u64, usize)> {
        match self {
            Self::Active => Some((50, 200, 42, 100)),
            Self::Light => Some((10, 30, 64, 100)),
            Self::All | Self::Count(_) => None,
        }
    }
}

impl fmt::Display for UserSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::Count(n) => write!(f, "{n}"),
            Self::Active => f.write_str("active"),
            Self::Light => f.write_str("light"),
        }
    }
}

impl FromStr for UserSelection {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all" => Ok(Self::All),
            "active" => Ok(Self::Active),
            "light" => Ok(Self::Light),
            n => n.parse::<usize>().map(Self::Count).map_err(|_| {
                config_err(
                    "users",
                    format!("`{n}` (expected a number, all, active or light)"),
                )
            }),
        }
    }
}

impl TryFrom<String> for UserSelection {
    type Error = EvalError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<UserSelection> for String {
    fn from(u: UserSelection) -> String {
        u.to_string()
    }
}

/// Which held-out interaction a decision ranks.
///
/// `Valid` is for tuning: the decision ranks the user's validation
/// interaction (the one before the test target, or the source's first `Valid`
/// one) and the test interactions are treated exactly as in a test run: the
/// retrospective protocol never shows them, no user's own test item is drawn
/// as a negative, and the evolving replay is unchanged (a decision sees
/// everything before its time), so settings can be chosen on validation and
/// reported on test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetSplit {
    /// The test interaction (the reported numbers).
    #[default]
    Test,
    /// The validation interaction (for tuning); users without one get no
    /// decision.
    Valid,
}

impl FromStr for TargetSplit {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "test" => Ok(Self::Test),
            "valid" => Ok(Self::Valid),
            other => Err(config_err(
                "target",
                format!("`{other}` (expected test or valid)"),
            )),
        }
    }
}

/// Whose interactions memory holds when `--users` picks a subsample.
///
/// `Selected` (the default) makes the subsample the dataset, as MARS
/// evaluates its active and light subsamples. `All` subsamples the
/// *decisions* only: every user's visible interactions still build memory,
/// as AtomRec's 1,000-user ablations do (Table 2: decisions for a sample,
/// collaborative memory from everyone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryUsers {
    /// Only the selected users' interactions are observed.
    #[default]
    Selected,
    /// Every user's interactions are observed; only the selected users decide.
    All,
}

impl FromStr for MemoryUsers {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "selected" => Ok(Self::Selected),
            "all" => Ok(Self::All),
            other => Err(config_err(
                "memory_users",
                format!("`{other}` (expected selected or all)"),
            )),
        }
    }
}

/// Protocol settings. Defaults: retrospective, 9 uniform negatives, fixed
/// lists as given, seed 42, all users, tick every 1000 interactions, test
/// targets, memory from the selected users.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProtocolConfig {
    /// Retrospective or evolving.
    pub protocol: ProtocolKind,
    /// Negatives per decision (default 9).
    pub negatives: usize,
    /// Negative sampling (default uniform).
    pub sampling: Sampling,
    /// Use of fixed candidate lists (default as given).
    pub fixed_candidates: FixedCandidates,
    /// Seed for negatives, shuffles and `--users N` (default 42).
    pub seed: u64,
    /// Which users (default all).
    pub users: UserSelection,
    /// Evolving: `maintain(Tick)` every this many interactions; 0 = never (default 1000).
    pub tick: usize,
    /// Which held-out interaction is ranked (default test).
    #[serde(default)]
    pub target: TargetSplit,
    /// Whose interactions build memory (default: the selected users).
    #[serde(default)]
    pub memory_users: MemoryUsers,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self {
            protocol: ProtocolKind::Retrospective,
            negatives: 9,
            sampling: Sampling::Uniform,
            fixed_candidates: FixedCandidates::AsGiven,
            seed: 42,
            users: UserSelection::All,
            tick: 1000,
            target: TargetSplit::Test,
            memory_users: MemoryUsers::Selected,
        }
    }
}

fn config_err(field: &str, message: String) -> EvalError {
    EvalError::Config {
        field: field.to_string(),
        message,
    }
}
