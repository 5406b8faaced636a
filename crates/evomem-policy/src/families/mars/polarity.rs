//! Signal polarity (§3.2): whether an observed interaction says the user
//! liked the item, was neutral about it, or disliked it.
//!
//! [`super::MarsConfig::polarity`] decides it from the rating (ml-100k ≥ 4
//! positive, ≤ 2 negative, 3 neutral; no rating is positive). It is written
//! as the number +1, 0 or −1 wherever it is stored or shown to a role (the
//! event record's `polarity` field and strength, role inputs), so records and
//! prompts read the same as before the type existed.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::cmp::Ordering;

/// Polarity of one signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Polarity {
    /// Liked (+1).
    Positive,
    /// Neither (0).
    Neutral,
    /// Disliked (−1).
    Negative,
}

impl Polarity {
    /// The stored number: +1, 0 or −1.
    pub const fn sign(self) -> i8 {
        match self {
            Polarity::Positive => 1,
            Polarity::Neutral => 0,
            Polarity::Negative => -1,
        }
    }

    /// The polarity of a stored number: its sign (records written before
    /// the type existed were clamped to [−1, 1] when read, which is the same).
    pub fn from_sign(v: i64) -> Self {
        match v.cmp(&0) {
            Ordering::Greater => Polarity::Positive,
            Ordering::Equal => Polarity::Neutral,
            Ordering::Less => Polarity::Negative,
        }
    }
}

impl Serialize for Polarity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i8(self.sign())
    }
}

impl<'de> Deserialize<'de> for Polarity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i8::deserialize(d)?;
        if (-1..=1).contains(&v) {
            Ok(Polarity::from_sign(i64::from(v)))
        } else {
            Err(serde::de::Error::custom(format!(
                "polarity must be -1, 0 or 1, got {v}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_the_old_number() {
        for (p, s) in [
            (Polarity::Positive, "1"),
            (Polarity::Neutral, "0"),
            (Polarity::Negative, "-1"),
        ] {
            assert_eq!(serde_json::to_string(&p).unwrap(), s);
            assert_eq!(serde_json::from_str::<Polarity>(s).unwrap(), p);
            assert_eq!(Polarity::from_sign(i64::from(p.sign())), p);
        }
        assert!(serde_json::from_str::<Polarity>("2").is_err());
        assert_eq!(Polarity::from_sign(5), Polarity::Positive);
        assert_eq!(Polarity::from_sign(-7), Polarity::Negative);
    }
}
