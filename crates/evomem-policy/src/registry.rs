//! The policy family table, and building policies from command-line specs.
//!
//! A spec is `NAME` or `NAME[key=value,key=value]`, e.g. `mars[tiers=ep,kcat=4]`.
//! A list of specs is comma-separated at bracket depth zero:
//! `random,pop,mars[kcat=2],mars[kcat=4]`.
//!
//! Every policy family is one row of [`FAMILIES`]: its name, its documented
//! and typed keys, its builder, its ablation grids and its capabilities.
//! Everything else derives from that one table: [`build`] (which checks that
//! every key is known and well typed before the family's builder sees it),
//! [`grid`], the `--help` list ([`help_text`]), `evomem inspect` and
//! `evomem explain` (which ask a family's [`Capabilities`]), and the policy
//! conformance suite. Adding a family is one module plus one row.

use evomem_core::{DecisionTag, Embedder, Policy, PolicyError};
use evomem_llm::LlmHub;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A parsed policy spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    /// Family name (`mars`, `bpr`, ...).
    pub name: String,
    /// Parameters in key order.
    pub params: BTreeMap<String, String>,
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.params.is_empty() {
            let kv: Vec<String> = self
                .params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            write!(f, "[{}]", kv.join(","))?;
        }
        Ok(())
    }
}

impl PolicySpec {
    /// Parse one spec.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        let s = s.trim();
        let Some(open) = s.find('[') else {
            if s.is_empty() {
                return Err(PolicyError::Config("empty policy name".into()));
            }
            return Ok(Self {
                name: s.to_string(),
                params: BTreeMap::new(),
            });
        };
        let Some(inner) = s[open + 1..].strip_suffix(']') else {
            return Err(PolicyError::Config(format!(
                "policy spec `{s}`: missing closing `]`"
            )));
        };
        let mut params = BTreeMap::new();
        for kv in inner.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(PolicyError::Config(format!(
                    "policy spec `{s}`: parameter `{kv}` is not key=value"
                )));
            };
            params.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(Self {
            name: s[..open].trim().to_string(),
            params,
        })
    }

    /// Parse a comma-separated list (commas inside brackets do not split).
    pub fn parse_list(s: &str) -> Result<Vec<Self>, PolicyError> {
        let mut out = Vec::new();
        let mut depth = 0i32;
        let mut start = 0;
        for (i, c) in s.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(Self::parse(&s[start..i])?);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(Self::parse(&s[start..])?);
        Ok(out)
    }

    /// A spec of family `name` with no parameters (every key at its default).
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_string(),
            params: BTreeMap::new(),
        }
    }

    /// The value of `key` for this spec's family: the spec's own value when
    /// it writes one, else the [`Key::default`] of the family's row. This is
    /// how every family reads its keys, so that a default is written once,
    /// in the table. A key the row does not declare, or a default that does
    /// not parse as `T`, is an error (a defect of the row; the generic test
    /// over every family catches both).
    pub fn value<T: std::str::FromStr>(&self, key: &str) -> Result<T, PolicyError> {
        self.value_in(family(&self.name)?.keys, key)
    }

    /// [`PolicySpec::value`] against a row outside the family table (the
    /// delayed arena's reference methods, whose rows have the same [`Key`]s).
    pub fn value_in<T: std::str::FromStr>(
        &self,
        keys: &'static [Key],
        key: &str,
    ) -> Result<T, PolicyError> {
        let declared = self.declared_in(keys, key)?;
        match self.params.get(key) {
            Some(v) => self.parse_value(key, v),
            None => declared.default.parse().map_err(|_| {
                PolicyError::Config(format!(
                    "{}: the default `{}` of `{key}` in the family table does not parse",
                    self.name, declared.default
                ))
            }),
        }
    }

    /// The value of `key` when the spec writes it, `None` when it is left at
    /// its default. For keys whose default depends on another key (MARS's
    /// `budget=paper` presets), where the caller picks the default.
    pub fn explicit<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, PolicyError> {
        self.declared(key)?;
        self.params
            .get(key)
            .map(|v| self.parse_value(key, v))
            .transpose()
    }

    fn declared(&self, key: &str) -> Result<&'static Key, PolicyError> {
        self.declared_in(family(&self.name)?.keys, key)
    }

    fn declared_in(&self, keys: &'static [Key], key: &str) -> Result<&'static Key, PolicyError> {
        #[cfg(test)]
        reads::note(&self.name, key);
        keys.iter().find(|k| k.name == key).ok_or_else(|| {
            PolicyError::Config(format!(
                "{}: the family table declares no key `{key}`",
                self.name
            ))
        })
    }

    fn parse_value<T: std::str::FromStr>(&self, key: &str, v: &str) -> Result<T, PolicyError> {
        v.parse()
            .map_err(|_| PolicyError::Config(format!("{}: bad value `{v}` for `{key}`", self.name)))
    }
}

/// Shared services handed to every policy at construction.
#[derive(Clone)]
pub struct PolicyDeps {
    /// Embedder for texts (MiniLM or hashing).
    pub embedder: Arc<dyn Embedder>,
    /// LLM role executor.
    pub llm: Arc<LlmHub>,
    /// Run seed.
    pub seed: u64,
}

/// The type of a key's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// `true` or `false`.
    Bool,
    /// A non-negative integer.
    Count,
    /// A finite number.
    Number,
    /// One of the listed words.
    Choice(&'static [&'static str]),
    /// Free text, checked by the family's builder (e.g. MARS tier sets).
    Text,
}

impl KeyType {
    /// Check `value`; the error says what was expected.
    pub fn check(self, value: &str) -> Result<(), String> {
        match self {
            KeyType::Bool => value
                .parse::<bool>()
                .map(|_| ())
                .map_err(|_| "expected true or false".to_string()),
            KeyType::Count => value
                .parse::<u64>()
                .map(|_| ())
                .map_err(|_| "expected a non-negative integer".to_string()),
            KeyType::Number => match value.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(()),
                _ => Err("expected a finite number".to_string()),
            },
            KeyType::Choice(options) => {
                if options.contains(&value) {
                    Ok(())
                } else {
                    Err(format!("expected one of {}", options.join(", ")))
                }
            }
            KeyType::Text => Ok(()),
        }
    }

    /// Short name for help texts.
    pub fn describe(self) -> String {
        match self {
            KeyType::Bool => "bool".into(),
            KeyType::Count => "count".into(),
            KeyType::Number => "number".into(),
            KeyType::Choice(o) => o.join("|"),
            KeyType::Text => "text".into(),
        }
    }
}

/// One documented, typed key of a family.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// Name as written in a spec.
    pub name: &'static str,
    /// Value type.
    pub ty: KeyType,
    /// Default, as written in a spec.
    pub default: &'static str,
    /// What it does, and where the default comes from.
    pub doc: &'static str,
}

/// A named ablation grid: the specs it expands to.
#[derive(Debug, Clone, Copy)]
pub struct Grid {
    /// Name (`evomem ablate --grid NAME`).
    pub name: &'static str,
    /// What it measures.
    pub doc: &'static str,
    /// The specs, as written on the command line.
    pub specs: &'static [&'static str],
}

/// What a family can do, for the tools that depend on it. Defined in
/// `evomem-core` ([`evomem_core::family`], one constant per built-in family)
/// so that readers of a family's output, such as the inspector, can ask by
/// name without linking the policies; re-exported here for the table's
/// callers.
pub use evomem_core::family::Capabilities;

/// What kind of method a family is (the README's family table and
/// `evomem eval --help` group by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyKind {
    /// A memory policy: memory records evolved by ops.
    Memory,
    /// A baseline without training (counts, similarities, random).
    Baseline,
    /// A trained baseline: a model fitted by gradient descent on the
    /// interactions the protocol lets it observe (BPR).
    Trained,
    /// A neural trained baseline (SASRec, LightGCN on candle): minutes of
    /// training, so `--policy all` leaves it out unless named.
    Neural,
}

impl FamilyKind {
    /// The label `--help` shows.
    pub fn label(self) -> &'static str {
        match self {
            Self::Memory => "memory policy",
            Self::Baseline => "baseline",
            Self::Trained => "trained baseline",
            Self::Neural => "trained baseline, neural; not in `all`",
        }
    }
}

/// A family's builder.
pub type BuildFn = fn(&PolicySpec, &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError>;

/// A policy family: one row of [`FAMILIES`].
#[derive(Clone, Copy)]
pub struct Family {
    /// Name on the command line.
    pub name: &'static str,
    /// What kind of method it is.
    pub kind: FamilyKind,
    /// One line for `--help`.
    pub summary: &'static str,
    /// Its keys.
    pub keys: &'static [Key],
    /// Its builder; called with a spec whose keys are known and well typed.
    pub build: BuildFn,
    /// Its ablation grids.
    pub grids: &'static [Grid],
    /// What it can do.
    pub caps: Capabilities,
}

impl fmt::Debug for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Family")
            .field("name", &self.name)
            .field("keys", &self.keys.len())
            .field("grids", &self.grids.len())
            .field("caps", &self.caps)
            .finish()
    }
}

impl Family {
    /// The key named `name`.
    pub fn key(&self, name: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.name == name)
    }

    /// Check that every parameter of `spec` is a key of this family with a
    /// value of the right type; the error names the key.
    pub fn check(&self, spec: &PolicySpec) -> Result<(), PolicyError> {
        check_keys(self.name, self.keys, spec)
    }

    /// True when the family serves `decision`.
    pub fn serves(&self, decision: DecisionTag) -> bool {
        self.caps.decisions.contains(&decision)
    }
}

/// Check that every parameter of `spec` is one of `keys` with a value of the
/// right type; the error names `name` and the key. [`Family::check`], and
/// the check of rows outside the family table.
pub fn check_keys(name: &str, keys: &[Key], spec: &PolicySpec) -> Result<(), PolicyError> {
    for (k, v) in &spec.params {
        let Some(key) = keys.iter().find(|key| key.name == k) else {
            let known: Vec<&str> = keys.iter().map(|k| k.name).collect();
            return Err(PolicyError::Config(format!(
                "{name}: unknown parameter `{k}` (known: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        };
        key.ty.check(v).map_err(|why| {
            PolicyError::Config(format!("{name}: bad value `{v}` for `{k}`: {why}"))
        })?;
    }
    Ok(())
}

/// Declares the family table: `pub static FAMILIES: &[Family]`, one row per
/// family. A row is either a path to a [`Family`] constant
/// (`crate::mars::FAMILY`) or `mod NAME`, which also declares the module
/// `NAME` (a file beside the table) and uses its `FAMILY`. Adding a small
/// family is therefore one new file and one row.
#[macro_export]
macro_rules! family_table {
    (@rows [$($acc:expr,)*]) => {
        /// Every policy family this build knows, in `--help` order.
        pub static FAMILIES: &[$crate::registry::Family] = &[$($acc,)*];
    };
    (@rows [$($acc:expr,)*] mod $m:ident, $($rest:tt)*) => {
        pub mod $m;
        $crate::family_table!(@rows [$($acc,)* $m::FAMILY,] $($rest)*);
    };
    (@rows [$($acc:expr,)*] $p:path, $($rest:tt)*) => {
        $crate::family_table!(@rows [$($acc,)* $p,] $($rest)*);
    };
    ($($rest:tt)*) => {
        $crate::family_table!(@rows [] $($rest)*);
    };
}

pub use crate::families::FAMILIES;

/// Which keys a builder read through [`PolicySpec::value`] and
/// [`PolicySpec::explicit`], per thread, for the generic test over every
/// family (a key read any other way, or never, is caught there).
#[cfg(test)]
pub(crate) mod reads {
    use std::cell::RefCell;

    thread_local! {
        static READS: RefCell<Vec<(String, String)>> = const { RefCell::new(Vec::new()) };
    }

    pub(crate) fn note(family: &str, key: &str) {
        READS.with(|r| r.borrow_mut().push((family.to_string(), key.to_string())));
    }

    /// The reads since the last call, emptied.
    pub(crate) fn take() -> Vec<(String, String)> {
        READS.with(|r| std::mem::take(&mut *r.borrow_mut()))
    }
}

/// The family called `name`.
pub fn family(name: &str) -> Result<&'static Family, PolicyError> {
    FAMILIES.iter().find(|f| f.name == name).ok_or_else(|| {
        PolicyError::Config(format!(
            "unknown policy `{name}` (known: {})",
            family_names().join(", ")
        ))
    })
}

/// The families that serve any of `decisions`, in table order.
pub fn families_serving(decisions: &[DecisionTag]) -> Vec<&'static Family> {
    FAMILIES
        .iter()
        .filter(|f| decisions.iter().any(|d| f.serves(*d)))
        .collect()
}

/// The ranking families whose state is each user's own memory (the
/// service's loop endpoints run these).
pub fn user_scoped_rankers() -> Vec<&'static str> {
    families_serving(&[DecisionTag::Rank])
        .into_iter()
        .filter(|f| f.caps.user_scoped)
        .map(|f| f.name)
        .collect()
}

/// Parse a list of specs in which the word `all` stands for every family
/// that serves any of `decisions` except the neural trained baselines,
/// which train for minutes and are named to be run (`all,sasrec,lightgcn`);
/// in table order; specs written beside it are kept, duplicates dropped.
pub fn parse_list_serving(
    list: &str,
    decisions: &[DecisionTag],
) -> Result<Vec<PolicySpec>, PolicyError> {
    let mut out: Vec<PolicySpec> = Vec::new();
    for spec in PolicySpec::parse_list(list)? {
        let expanded = if spec.name == "all" && spec.params.is_empty() {
            families_serving(decisions)
                .into_iter()
                .filter(|f| f.kind != FamilyKind::Neural)
                .map(|f| PolicySpec::named(f.name))
                .collect()
        } else {
            vec![spec]
        };
        for s in expanded {
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    Ok(out)
}

/// The family names, in table order.
pub fn family_names() -> Vec<&'static str> {
    FAMILIES.iter().map(|f| f.name).collect()
}

/// Build one policy: look up its family, check its keys, call its builder.
pub fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    let fam = family(&spec.name)?;
    fam.check(spec)?;
    (fam.build)(spec, deps)
}

/// Named ablation grids: `(policy family, grid name)` to a list of specs.
pub fn grid(policy: &str, name: &str) -> Result<Vec<PolicySpec>, PolicyError> {
    let fam = family(policy)?;
    if fam.grids.is_empty() {
        return Err(PolicyError::Config(format!(
            "policy `{policy}` has no ablation grids"
        )));
    }
    let g = fam.grids.iter().find(|g| g.name == name).ok_or_else(|| {
        let names: Vec<&str> = fam.grids.iter().map(|g| g.name).collect();
        PolicyError::Config(format!(
            "{policy}: unknown grid `{name}` (known: {})",
            names.join(", ")
        ))
    })?;
    let specs = g
        .specs
        .iter()
        .map(|s| PolicySpec::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    for s in &specs {
        fam.check(s)?;
    }
    Ok(specs)
}

/// The families, their keys and grids, as the CLI's `--help` shows them.
pub fn help_text() -> String {
    let mut s = String::new();
    for f in FAMILIES {
        s.push_str(&format!(
            "  {:<10} [{}] {}\n",
            f.name,
            f.kind.label(),
            f.summary
        ));
        for k in f.keys {
            s.push_str(&format!(
                "      {}={} ({}, default {})\n",
                k.name,
                k.ty.describe(),
                k.doc,
                k.default
            ));
        }
        for g in f.grids {
            s.push_str(&format!("      grid `{}`: {}\n", g.name, g.doc));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_with_brackets() {
        let l = PolicySpec::parse_list("pop,mars[tiers=ep,kcat=2],bpr").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].name, "mars");
        assert_eq!(l[1].params["kcat"], "2");
        assert_eq!(l[1].to_string(), "mars[kcat=2,tiers=ep]");
    }

    #[test]
    fn rejects_unclosed_bracket() {
        assert!(PolicySpec::parse("mars[kcat=2").is_err());
    }

    #[test]
    fn family_names_are_unique_and_every_default_and_grid_checks() {
        let mut names = family_names();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FAMILIES.len());
        for f in FAMILIES {
            for k in f.keys {
                assert!(
                    k.ty.check(k.default).is_ok(),
                    "{}: default `{}` of `{}` does not check",
                    f.name,
                    k.default,
                    k.name
                );
            }
            for g in f.grids {
                let specs = grid(f.name, g.name).unwrap();
                assert!(!specs.is_empty(), "{}: grid {} is empty", f.name, g.name);
                assert!(specs.iter().all(|s| s.name == f.name));
            }
        }
    }

    fn test_deps() -> PolicyDeps {
        PolicyDeps {
            embedder: Arc::new(evomem_embed::HashingEmbedder::new(64)),
            llm: Arc::new(LlmHub::offline()),
            seed: 7,
        }
    }

    /// The one generic test over every family: each builds with every key at
    /// its row's default (so every default parses as the type the family
    /// reads), and each key, written in a spec at its default, is read
    /// through [`PolicySpec::value`] or [`PolicySpec::explicit`] (so no
    /// family keeps a second default in code, or reads a key raw).
    #[test]
    fn every_family_reads_every_key_through_the_table() {
        for f in FAMILIES {
            reads::take();
            if let Err(e) = build(&PolicySpec::named(f.name), &test_deps()) {
                panic!("{}: does not build at its defaults: {e}", f.name);
            }
            for k in f.keys {
                let mut spec = PolicySpec::named(f.name);
                spec.params
                    .insert(k.name.to_string(), k.default.to_string());
                reads::take();
                if let Err(e) = build(&spec, &test_deps()) {
                    panic!(
                        "{}: does not build with `{}={}`: {e}",
                        f.name, k.name, k.default
                    );
                }
                let read = reads::take();
                assert!(
                    read.iter().any(|(fam, key)| fam == f.name && key == k.name),
                    "{}: key `{}` is not read through the family table",
                    f.name,
                    k.name
                );
            }
        }
    }

    #[test]
    fn lists_derive_from_capabilities() {
        let names = |v: Vec<PolicySpec>| v.into_iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let rank = names(parse_list_serving("all", &[DecisionTag::Rank]).unwrap());
        let expected: Vec<String> = FAMILIES
            .iter()
            .filter(|f| f.caps.decisions.contains(&DecisionTag::Rank))
            .filter(|f| f.kind != FamilyKind::Neural)
            .map(|f| f.name.to_string())
            .collect();
        assert_eq!(rank, expected);
        // The neural trained baselines join `all` when named beside it.
        let named = names(parse_list_serving("all,sasrec,lightgcn", &[DecisionTag::Rank]).unwrap());
        assert_eq!(named.len(), expected.len() + 2);
        assert!(!rank.contains(&"sasrec".to_string()));
        for (name, ranks) in [
            ("seqmem", true),
            ("mars", true),
            ("memrl", false),
            ("tide", false),
        ] {
            assert_eq!(rank.contains(&name.to_string()), ranks, "{name}");
        }
        // Specs beside `all` stay, duplicates go.
        let mixed =
            names(parse_list_serving("pop,all,mars[kcat=2]", &[DecisionTag::Rank]).unwrap());
        assert_eq!(mixed[0], "pop");
        assert_eq!(mixed.iter().filter(|s| *s == "pop").count(), 1);
        assert_eq!(mixed.last().map(String::as_str), Some("mars[kcat=2]"));
        let predict = names(parse_list_serving("all", &[DecisionTag::Predict]).unwrap());
        assert!(predict.contains(&"tide".to_string()) && !predict.contains(&"pop".to_string()));
        let scoped = user_scoped_rankers();
        assert!(scoped.contains(&"no-memory") && scoped.contains(&"mars"));
        assert!(
            !scoped.contains(&"atomrec") && !scoped.contains(&"seqmem") && !scoped.contains(&"bpr")
        );
    }

    /// The capabilities live in `evomem-core` so that the inspector can ask
    /// by name; its list and this table must name the same families, each
    /// with its row's capabilities.
    #[test]
    fn every_row_has_the_capabilities_core_names_it_with() {
        for f in FAMILIES {
            assert_eq!(
                evomem_core::family::capabilities(f.name),
                Some(f.caps),
                "{}: add it to evomem_core::family::BUILT_IN with its row's caps",
                f.name
            );
        }
        let rows: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
        let core: Vec<&str> = evomem_core::family::BUILT_IN
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(core, rows, "evomem_core::family::BUILT_IN and FAMILIES");
    }

    #[test]
    fn a_key_outside_the_row_or_a_bad_default_is_an_error() {
        let spec = PolicySpec::named("bpr");
        let e = spec.value::<usize>("no_such_key").unwrap_err();
        assert!(
            e.to_string().contains("declares no key `no_such_key`"),
            "{e}"
        );
        // `lr`'s default is a number, not a count.
        let e = spec.value::<usize>("lr").unwrap_err();
        assert!(e.to_string().contains("default `0.05` of `lr`"), "{e}");
        assert_eq!(spec.explicit::<f64>("lr").unwrap(), None);
        let set = PolicySpec::parse("bpr[lr=0.1]").unwrap();
        assert_eq!(set.explicit::<f64>("lr").unwrap(), Some(0.1));
        assert_eq!(set.value::<f64>("lr").unwrap(), 0.1);
    }

    #[test]
    fn unknown_and_mistyped_keys_name_the_key() {
        let f = family("bpr").unwrap();
        let e = f
            .check(&PolicySpec::parse("bpr[dims=3]").unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("`dims`"), "{e}");
        let e = f
            .check(&PolicySpec::parse("bpr[dim=x]").unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("`dim`"), "{e}");
        assert!(family("nope").is_err());
    }
}
