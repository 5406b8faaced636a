//! AtomRec configuration: the paper's hyperparameters (§3, "Implementation
//! Details": k_link = 20, τ_evo = 0.7, h = 2, k_ret = 15) plus one flag per
//! ablation of Table 2, parsed from a [`PolicySpec`] such as
//! `atomrec[collab=false,h=1]`. The keys, their types, defaults and docs are
//! the rows of [`super::FAMILY`]; a test checks those defaults against
//! [`AtomRecConfig::default`].

use super::ranker::RankWeights;
use crate::registry::PolicySpec;
use evomem_core::PolicyError;
use serde::Serialize;

/// Resolved AtomRec settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtomRecConfig {
    /// Atomic notes (`true`) or one coarse summary per user (`atomic=false`). Default `true`.
    pub atomic: bool,
    /// Keywords K and tags G in notes and embeddings (`kt`). Default `true`.
    pub keywords_tags: bool,
    /// Context field X (`context`). Default `true`.
    pub context: bool,
    /// Collaborative links to other users' atoms on the same item (`collab`). Default `true`.
    pub collab: bool,
    /// Typed relations chosen by the link role (`typed`); `false` = embedding-only links. Default `true`.
    pub typed: bool,
    /// Field-level evolution of neighbours (`evolve`); `false` = append-only. Default `true`.
    pub evolve: bool,
    /// Link-aware retrieval (`linkret`); `false` = top-k_ret only. Default `true`.
    pub link_retrieval: bool,
    /// Neighbours considered for linking, k_link (paper default 20).
    pub k_link: usize,
    /// Evolution trigger threshold τ_evo on cosine (paper default 0.7).
    pub tau: f32,
    /// Link hops expanded at retrieval, h (paper default 2).
    pub hops: usize,
    /// Seed atoms retrieved by cosine, k_ret (paper default 15).
    pub k_ret: usize,
    /// How many of other users' most recent atoms on the same item enter the
    /// linking pool (bounds the collaborative candidate set). Default 10.
    pub collab_pool: usize,
    /// Most neighbours evolved per new note (bounds op volume). Default 3.
    pub evo_max: usize,
    /// Per-hop decay of path scores. Default 0.6.
    pub decay: f32,
    /// Weight of E(X) in a note's embedding e. Default 1.0 (the context field
    /// weighs as much as the others; `context=false` drops it entirely).
    pub w_context: f32,
    /// Weights of the offline ranker (`w_path`, `w_co`, `w_sem`, `w_pop`; see
    /// [`super::ranker`]).
    pub rank: RankWeights,
    /// Popularity discount α of the co-consumption walk mass: an item's mass
    /// is divided by (1 + n_i)^α, n_i its audience (user atoms about it), so
    /// that walks reward items that co-occur more than their popularity alone
    /// explains (the lift idea of item-to-item CF). Default 0.5.
    pub co_pop: f64,
}

impl Default for AtomRecConfig {
    fn default() -> Self {
        Self {
            atomic: true,
            keywords_tags: true,
            context: true,
            collab: true,
            typed: true,
            evolve: true,
            link_retrieval: true,
            k_link: 20,
            tau: 0.7,
            hops: 2,
            k_ret: 15,
            collab_pool: 10,
            evo_max: 3,
            decay: 0.6,
            w_context: super::W_CONTEXT,
            rank: RankWeights::default(),
            co_pop: 0.5,
        }
    }
}

impl AtomRecConfig {
    /// Parse from a spec whose keys the registry has checked against
    /// [`super::FAMILY`] (keys that are not config, such as `timing`, are
    /// ignored here); bad values are errors naming the key.
    pub fn from_spec(spec: &PolicySpec) -> Result<Self, PolicyError> {
        let d = Self::default();
        let cfg = Self {
            atomic: spec.get("atomic", d.atomic)?,
            keywords_tags: spec.get("kt", d.keywords_tags)?,
            context: spec.get("context", d.context)?,
            collab: spec.get("collab", d.collab)?,
            typed: spec.get("typed", d.typed)?,
            evolve: spec.get("evolve", d.evolve)?,
            link_retrieval: spec.get("linkret", d.link_retrieval)?,
            k_link: spec.get("k_link", d.k_link)?,
            tau: spec.get("tau", d.tau)?,
            hops: spec.get("h", d.hops)?,
            k_ret: spec.get("k_ret", d.k_ret)?,
            collab_pool: spec.get("collab_pool", d.collab_pool)?,
            evo_max: spec.get("evo_max", d.evo_max)?,
            decay: spec.get("decay", d.decay)?,
            w_context: spec.get("w_context", d.w_context)?,
            rank: RankWeights {
                path: spec.get("w_path", d.rank.path)?,
                co: spec.get("w_co", d.rank.co)?,
                semantic: spec.get("w_sem", d.rank.semantic)?,
                popularity: spec.get("w_pop", d.rank.popularity)?,
            },
            co_pop: spec.get("co_pop", d.co_pop)?,
        };
        if !(cfg.tau.is_finite() && (-1.0..=1.0).contains(&cfg.tau)) {
            return Err(PolicyError::Config(format!(
                "atomrec: `tau` must be in [-1, 1], got {}",
                cfg.tau
            )));
        }
        if !(cfg.decay.is_finite() && cfg.decay > 0.0 && cfg.decay <= 1.0) {
            return Err(PolicyError::Config(format!(
                "atomrec: `decay` must be in (0, 1], got {}",
                cfg.decay
            )));
        }
        if !(cfg.w_context.is_finite() && cfg.w_context >= 0.0) {
            return Err(PolicyError::Config(format!(
                "atomrec: `w_context` must be finite and non-negative, got {}",
                cfg.w_context
            )));
        }
        for (key, v) in [
            ("w_path", cfg.rank.path),
            ("w_co", cfg.rank.co),
            ("w_sem", cfg.rank.semantic),
            ("w_pop", cfg.rank.popularity),
            ("co_pop", cfg.co_pop),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(PolicyError::Config(format!(
                    "atomrec: `{key}` must be finite and non-negative, got {v}"
                )));
            }
        }
        if cfg.k_ret == 0 {
            return Err(PolicyError::Config(
                "atomrec: `k_ret` must be at least 1".into(),
            ));
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key's documented default parses to the config's default, and
    /// every config key is a family key.
    #[test]
    fn family_key_defaults_match_config_defaults() {
        let mut spec = PolicySpec::parse("atomrec").unwrap_or_else(|e| panic!("{e}"));
        for k in super::super::FAMILY.keys {
            spec.params
                .insert(k.name.to_string(), k.default.to_string());
        }
        let from_docs = AtomRecConfig::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(from_docs, AtomRecConfig::default());
        let cfg = serde_json::to_value(AtomRecConfig::default()).unwrap_or_default();
        let n_cfg_fields = cfg.as_object().map_or(0, |o| o.len()) - 1 + 4; // `rank` holds four keys
                                                                           // Family keys = config fields + `timing`.
        assert_eq!(super::super::FAMILY.keys.len(), n_cfg_fields + 1);
    }
}
