//! The policy conformance suite: every family in the family table that serves
//! ranking decisions, run through the real driver (`run_policy`) on a small
//! generated dataset (both protocols) and on 50 real ml-100k users, must
//!
//! - be deterministic: the same seed gives identical ops, decisions and
//!   metrics;
//! - pass the leak canary: at every recall, nothing of the user at or after
//!   the decision time was observed or is in memory, and no test interaction
//!   was shown (retrospective); feedback comes only under the evolving
//!   protocol, never before its outcome is visible, and names only the
//!   user's own interaction that became visible;
//! - keep users apart, in what its `recall` hands to the decider (the rules
//!   are below);
//! - emit only valid ops, and replaying its op log into an empty memory gives
//!   exactly the live memory;
//! - give exactly the offline result when the LLM answers garbage on every
//!   call (the hub repairs, falls back and counts it), and fail the run when
//!   the backend fails at the transport level on every call.
//!
//! A new family is picked up by being a row of the table; nothing here names
//! one.
//!
//! # Isolation rules
//! At a recall for user `u` at time `t`, an item is *foreign* when some other
//! user's interaction with it was shown to the policy, `u`'s never was, and it
//! is not a candidate of this decision: the policy can only know it from
//! other users. (An item nobody interacted with is catalog knowledge; `u`'s
//! own items and the candidates are in the query.) The *texts* of a recall
//! are its profile, its entries' texts, their evidence paths' node ids
//! and relations, and its candidates' item-memory texts. For every family:
//!
//! 1. every record an entry or the usage trace cites is in memory, and not
//!    in another user's `user:` namespace;
//! 2. no text contains, as a word, the id of a record in another user's
//!    namespace, nor another user's namespace (`user:<token>`), nor another
//!    user's token where a token can only mean its user (see [`Lexicon`]);
//! 3. an entry about a foreign item never cites a record of `u`'s own
//!    namespace (own records are about what `u` consumed).
//!
//! A family without collaborative namespaces (`Capabilities::collaborative`
//! false) must also keep other users' items out:
//!
//! 4. no entry is about a foreign item, and no text mentions a foreign item
//!    by its title or token (where they can only mean that item, see
//!    [`Lexicon`]);
//! 5. every cited record is in `u`'s own namespace, and no entry is
//!    anonymised (evidence path without a record).
//!
//! A collaborative family may hand the decider other users' evidence, but
//! only in the declared anonymised form: entries about foreign items cite an
//! item or shared record or none (rules 1 and 3), paths name other users'
//! atoms by a label that is no record id (rule 2), and no text names the
//! other user (rule 2).
//!
//! Not checkable, and not checked: text that paraphrases another user's
//! record (a non-collaborative family that wrote "likes horror" from someone
//! else's history says nothing a text check can tell from the user's own
//! taste); numeric tokens and one-word titles, which collide with ratings,
//! years and ordinary words, and titles found inside another title (on
//! ml-100k every user and item token is a number, so rules 2 and 4 fall
//! back to namespaces, record ids, entries' items and 1,304 of 1,682
//! titles there); and `DecisionContext::scores`, which are aggregate model
//! output (popularity, co-occurrence, factors) that the protocol allows
//! every baseline.
//!
//! Each run gets its own [`Guard`], which owns its counters and flags:
//! nothing is shared between tests running in parallel, and a run must show
//! one checked recall per decision. That the rules bite is shown on a
//! policy that breaks each one on purpose ([`Gossip`]) and on a
//! collaborative family judged as a private one.

use crate::common::shared_dataset;
use evomem_core::{
    ChatRequest, ChatResponse, ContextEntry, Dataset, DecisionQuery, Feedback, Interaction, ItemId,
    LanguageModel, LlmError, LogicalTime, MaintainTrigger, MemoryId, MemoryOp, MemoryRecord,
    MemoryState, Namespace, PlannedOp, Policy, PolicyCtx, PolicyError, Recall, RecordKind,
    SplitRole, Usage, UsageTrace, UserId,
};
use evomem_eval::decider::Decider;
use evomem_eval::protocol::{Plan, ProtocolConfig, ProtocolKind, UserSelection};
use evomem_eval::replay::{run_policy, PolicyRun};
use evomem_eval::synthetic::synthetic_dataset;
use evomem_eval::EvalError;
use evomem_kit::testing::TestEmbedder;
use evomem_llm::{CacheSettings, LlmHub};
use evomem_policy::registry::{self, Family, PolicyDeps, PolicySpec, FAMILIES};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Separators of record ids in text (ids themselves hold `:`, `-`, `_`).
const ID_SEPARATORS: &str = "[](){},;\"'";

fn id_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || ID_SEPARATORS.contains(c))
        .filter(|w| !w.is_empty())
}

fn alnum_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// Multi-word titles, found in a text by their first word: one pass over
/// the text's words, not one search per title.
#[derive(Default)]
struct Titles {
    /// First alphanumeric word -> (item, title, byte offset of that word in
    /// the title).
    by_first_word: BTreeMap<String, Vec<(ItemId, String, usize)>>,
}

impl Titles {
    /// Index the titles of `items` that have two words or more.
    fn of<'a>(items: impl Iterator<Item = (ItemId, &'a str)>) -> Self {
        let mut by_first_word: BTreeMap<String, Vec<(ItemId, String, usize)>> = BTreeMap::new();
        for (id, title) in items {
            let t = title.trim();
            if t.split_whitespace().nth(1).is_none() {
                continue;
            }
            if let Some((off, w)) = words_at(t).next() {
                by_first_word
                    .entry(w.to_string())
                    .or_default()
                    .push((id, t.to_string(), off));
            }
        }
        Self { by_first_word }
    }

    /// Items whose title occurs in `text` with no letter or digit on either
    /// side.
    fn found_in(&self, text: &str) -> BTreeSet<ItemId> {
        let mut out = BTreeSet::new();
        for (k, w) in words_at(text) {
            for (id, title, off) in self.by_first_word.get(w).into_iter().flatten() {
                let Some(start) = k.checked_sub(*off) else {
                    continue;
                };
                let Some(rest) = text.get(start..) else {
                    continue;
                };
                let before = text[..start].chars().next_back();
                let after = rest.get(title.len()..).and_then(|r| r.chars().next());
                if rest.starts_with(title.as_str())
                    && !before.is_some_and(char::is_alphanumeric)
                    && !after.is_some_and(char::is_alphanumeric)
                {
                    out.insert(*id);
                }
            }
        }
        out
    }

    fn len(&self) -> usize {
        self.by_first_word.values().map(Vec::len).sum()
    }
}

/// The alphanumeric words of `text` with their byte offsets.
fn words_at(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut starts = Vec::new();
    let mut prev = false;
    for (k, c) in text.char_indices() {
        let alnum = c.is_alphanumeric();
        if alnum && !prev {
            starts.push(k);
        }
        prev = alnum;
    }
    starts.into_iter().map(move |k| {
        let end = text[k..]
            .find(|c: char| !c.is_alphanumeric())
            .map_or(text.len(), |e| k + e);
        (k, &text[k..end])
    })
}

/// What text can name, per dataset: the tokens and titles that can only
/// mean one user or one item, so that finding them in a text is evidence.
struct Lexicon {
    /// User tokens by user.
    user_token: Vec<String>,
    /// Every user by token (the `user:<token>` form is always precise).
    user_by_token: BTreeMap<String, UserId>,
    /// Users whose token can only mean them: alphanumeric with a letter, no
    /// word of the catalog's titles, categories, texts or attributes, and no
    /// item token.
    distinct_users: BTreeMap<String, UserId>,
    /// Items whose token can only mean them (the same test, with no user
    /// token).
    distinct_items: BTreeMap<String, ItemId>,
    /// Titles that can only mean their item: two words or more, and not
    /// found (word-bounded) in any other item's title.
    titles: Titles,
}

impl Lexicon {
    fn new(data: &Dataset) -> Self {
        let mut words: BTreeSet<&str> = BTreeSet::new();
        for it in &data.catalog.items {
            let texts = [it.title.as_str()]
                .into_iter()
                .chain(it.categories.iter().map(String::as_str))
                .chain(it.text.values().map(String::as_str))
                .chain(it.attributes.values().map(String::as_str));
            for t in texts {
                words.extend(alnum_words(t));
            }
        }
        let user_token: Vec<String> = data.users.iter().map(|u| u.token.clone()).collect();
        let user_by_token = data.users.iter().map(|u| (u.token.clone(), u.id)).collect();
        let precise = |tok: &str| {
            tok.chars().all(char::is_alphanumeric)
                && tok.chars().any(char::is_alphabetic)
                && !words.contains(tok)
        };
        let item_tokens: BTreeSet<&str> = data
            .catalog
            .items
            .iter()
            .map(|i| i.token.as_str())
            .collect();
        let distinct_users = data
            .users
            .iter()
            .filter(|u| precise(&u.token) && !item_tokens.contains(u.token.as_str()))
            .map(|u| (u.token.clone(), u.id))
            .collect();
        let distinct_items = data
            .catalog
            .items
            .iter()
            .filter(|i| precise(&i.token) && !user_token.contains(&i.token))
            .map(|i| (i.token.clone(), i.id))
            .collect();
        let all = Titles::of(data.catalog.items.iter().map(|i| (i.id, i.title.as_str())));
        let mut shared: BTreeSet<ItemId> = BTreeSet::new();
        for it in &data.catalog.items {
            shared.extend(all.found_in(&it.title).into_iter().filter(|&i| i != it.id));
        }
        let titles = Titles::of(
            data.catalog
                .items
                .iter()
                .filter(|i| !shared.contains(&i.id))
                .map(|i| (i.id, i.title.as_str())),
        );
        Self {
            user_token,
            user_by_token,
            distinct_users,
            distinct_items,
            titles,
        }
    }
}

/// What a guard flags: the leak checks and the isolation rules of the
/// module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rule {
    /// The recall was shown, or memory holds, what the protocol hides.
    Leak,
    /// Feedback under the retrospective protocol, or before its outcome.
    Feedback,
    /// 1: a cited record that memory does not hold.
    UnknownRecord,
    /// 1: a cited record in another user's namespace.
    OtherRecord,
    /// 2: another user's record id in a text.
    OtherRecordId,
    /// 2: another user's namespace in a text.
    OtherNamespace,
    /// 2: another user's token in a text.
    OtherToken,
    /// 3: an own record about a foreign item.
    OwnRecordForeignItem,
    /// 4: an entry about a foreign item.
    ForeignItem,
    /// 4: a foreign item's title in a text.
    ForeignTitle,
    /// 4: a foreign item's token in a text.
    ForeignToken,
    /// 5: a cited record outside the user's namespace.
    SharedRecord,
    /// 5: an anonymised entry.
    Anonymised,
}

/// What the guard checked, to show that its checks ran.
#[derive(Debug, Clone, Copy, Default)]
struct Checked {
    recalls: usize,
    /// Non-empty texts searched for other users' ids, tokens and items.
    texts: usize,
    /// Entries about foreign items that a collaborative family handed over
    /// in the anonymised form.
    anonymised_foreign: usize,
}

/// Wraps a policy and checks, at every call, what the driver and the policy
/// may see and say. Everything it counts or flags is its own: parallel tests
/// share nothing.
struct Guard {
    inner: Box<dyn Policy>,
    collaborative: bool,
    evolving: bool,
    roles: Vec<SplitRole>,
    lexicon: Arc<Lexicon>,
    /// (user, item) of every interaction, by logical time: what feedback
    /// may reveal.
    truth: Vec<(UserId, ItemId)>,
    seen: Vec<Interaction>,
    /// Observed interactions per item (anyone's).
    audience: Vec<u32>,
    /// Items each user was observed with.
    own: Vec<BTreeSet<ItemId>>,
    /// How often each rule tripped.
    tripped: BTreeMap<Rule, usize>,
    /// The first violations of each rule, in words.
    violations: Vec<String>,
    checked: Checked,
}

/// What the isolation checks of one recall share: the decision, the
/// deciding user's namespace, and which items are foreign to that user
/// (consumed only by others, neither own nor a candidate).
struct RecallScope<'a> {
    q: &'a DecisionQuery,
    my_ns: Namespace,
    foreign: &'a dyn Fn(ItemId) -> bool,
}

impl Guard {
    fn new(
        inner: Box<dyn Policy>,
        collaborative: bool,
        plan: &Plan<'_>,
        lexicon: Arc<Lexicon>,
    ) -> Self {
        Self {
            inner,
            collaborative,
            evolving: plan.config.protocol == ProtocolKind::Evolving,
            roles: (0..plan.dataset.interactions.len())
                .map(|k| plan.role(LogicalTime(k as u64)))
                .collect(),
            lexicon,
            truth: plan
                .dataset
                .interactions
                .iter()
                .map(|i| (i.user, i.item))
                .collect(),
            seen: Vec::new(),
            audience: vec![0; plan.dataset.catalog.len()],
            own: vec![BTreeSet::new(); plan.dataset.users.len()],
            tripped: BTreeMap::new(),
            violations: Vec::new(),
            checked: Checked::default(),
        }
    }

    /// Count a violation of `rule`; the first three of each rule are kept
    /// in words.
    fn flag(&mut self, rule: Rule, v: String) {
        let n = self.tripped.entry(rule).or_insert(0);
        *n += 1;
        if *n <= 3 {
            self.violations.push(format!("{rule:?}: {v}"));
        }
    }

    fn check_leaks(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) {
        let mut bad = Vec::new();
        for s in &self.seen {
            if s.user == q.user && s.time >= q.at {
                bad.push((
                    Rule::Leak,
                    format!(
                        "decision {} (user {}, at {}) was shown the user's interaction at {}",
                        q.decision_id, q.user.0, q.at, s.time
                    ),
                ));
            }
            if !self.evolving && self.roles[s.time.0 as usize] == SplitRole::Test {
                bad.push((
                    Rule::Leak,
                    format!("a test interaction at {} was shown", s.time),
                ));
            }
        }
        // Retrospective memory is built in one pass before any decision, so
        // records may carry later op times; what they were built from is
        // checked on the op log ([`sources_visible`]).
        if self.evolving {
            let me = Namespace::user(&self.lexicon.user_token[q.user.index()]);
            for r in ctx.memory.scan(std::slice::from_ref(&me)) {
                if r.created_at >= q.at {
                    bad.push((
                        Rule::Leak,
                        format!(
                            "decision {} at {}: memory holds {} created at {}",
                            q.decision_id, q.at, r.id, r.created_at
                        ),
                    ));
                }
            }
        }
        for (rule, v) in bad {
            self.flag(rule, v);
        }
    }

    /// Rules 1–5 of the module docs on one recall.
    fn check_isolation(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery, out: &Recall) {
        let me = q.user;
        let my_ns = Namespace::user(&self.lexicon.user_token[me.index()]);
        let cands: BTreeSet<ItemId> = q.candidates().iter().copied().collect();
        let own = &self.own[me.index()];
        let foreign = |i: ItemId| {
            self.audience.get(i.index()).is_some_and(|&n| n > 0)
                && !own.contains(&i)
                && !cands.contains(&i)
        };
        let sc = RecallScope {
            q,
            my_ns,
            foreign: &foreign,
        };
        let mut bad = Vec::new();
        let mut checked = self.checked;
        checked.recalls += 1;
        self.check_cited(ctx, &sc, out, &mut bad);
        self.check_entries(ctx, &sc, out, &mut checked, &mut bad);
        // Rules 2 and 4 on every text.
        let texts = out
            .context
            .profile
            .iter()
            .map(String::as_str)
            .chain(out.context.entries.iter().flat_map(entry_texts))
            .chain(out.context.item_memory.iter().map(|m| m.text.as_str()))
            .filter(|t| !t.is_empty());
        for text in texts {
            checked.texts += 1;
            self.check_text(ctx, &sc, text, &mut bad);
        }
        self.checked = checked;
        for (rule, v) in bad {
            self.flag(rule, v);
        }
    }

    /// Rules 1 and 5 on every cited record.
    fn check_cited(
        &self,
        ctx: &PolicyCtx<'_>,
        sc: &RecallScope<'_>,
        out: &Recall,
        bad: &mut Vec<(Rule, String)>,
    ) {
        let d = sc.q.decision_id;
        let my_ns = &sc.my_ns;
        let cited = out
            .context
            .entries
            .iter()
            .filter_map(|e| e.memory.as_ref())
            .chain(out.trace.used.iter().map(|u| &u.id));
        for id in cited {
            match ctx.memory.get(id).map(|r| &r.namespace) {
                None => bad.push((
                    Rule::UnknownRecord,
                    format!("decision {d}: cites {id}, which memory does not hold"),
                )),
                Some(ns) if ns.is_user_private() && ns != my_ns => bad.push((
                    Rule::OtherRecord,
                    format!("decision {d}: cites another user's record {id} (in {ns})"),
                )),
                Some(ns) if !self.collaborative && ns != my_ns => bad.push((
                    Rule::SharedRecord,
                    format!(
                        "decision {d}: a non-collaborative family cites {id} in the shared {ns}"
                    ),
                )),
                Some(_) => {}
            }
        }
    }

    /// Rules 3, 4 (entries' items) and 5 (anonymised entries); counts the
    /// anonymised entries about foreign items a collaborative family may
    /// return.
    fn check_entries(
        &self,
        ctx: &PolicyCtx<'_>,
        sc: &RecallScope<'_>,
        out: &Recall,
        checked: &mut Checked,
        bad: &mut Vec<(Rule, String)>,
    ) {
        let d = sc.q.decision_id;
        let my_ns = &sc.my_ns;
        let foreign = sc.foreign;
        for e in &out.context.entries {
            if !self.collaborative && e.memory.is_none() && e.path.is_some() {
                bad.push((
                    Rule::Anonymised,
                    format!(
                        "decision {d}: a non-collaborative family returned an anonymised entry"
                    ),
                ));
            }
            let Some(item) = e.item.filter(|&i| foreign(i)) else {
                continue;
            };
            let ns = e
                .memory
                .as_ref()
                .and_then(|id| ctx.memory.get(id))
                .map(|r| &r.namespace);
            if ns == Some(my_ns) {
                bad.push((Rule::OwnRecordForeignItem, format!(
                    "decision {d}: own record {:?} is about item {}, which only other users consumed",
                    e.memory, item.0
                )));
            } else if !self.collaborative {
                bad.push((
                    Rule::ForeignItem,
                    format!(
                        "decision {d}: an entry is about item {}, which only other users consumed",
                        item.0
                    ),
                ));
            } else {
                checked.anonymised_foreign += 1;
            }
        }
    }

    /// Rules 2 and 4 on one text: no other user's record id, namespace or
    /// token, and (non-collaborative families) no foreign item's token or
    /// title.
    fn check_text(
        &self,
        ctx: &PolicyCtx<'_>,
        sc: &RecallScope<'_>,
        text: &str,
        bad: &mut Vec<(Rule, String)>,
    ) {
        let me = sc.q.user;
        let d = sc.q.decision_id;
        let my_ns = &sc.my_ns;
        let foreign = sc.foreign;
        let lex = &self.lexicon;
        for w in id_words(text) {
            if let Some(r) = ctx.memory.get(&MemoryId::new(w)) {
                if r.namespace.is_user_private() && r.namespace != *my_ns {
                    bad.push((
                        Rule::OtherRecordId,
                        format!("decision {d}: a text names another user's record {w}"),
                    ));
                }
            }
        }
        for (k, _) in text.match_indices("user:") {
            let tok = id_words(&text[k + 5..])
                .next()
                .and_then(|w| w.split(':').next())
                .unwrap_or("");
            if lex.user_by_token.get(tok).is_some_and(|&u| u != me) {
                bad.push((
                    Rule::OtherNamespace,
                    format!("decision {d}: a text names another user's namespace user:{tok}"),
                ));
            }
        }
        for w in alnum_words(text) {
            if lex.distinct_users.get(w).is_some_and(|&u| u != me) {
                bad.push((
                    Rule::OtherToken,
                    format!("decision {d}: a text names another user's token {w}"),
                ));
            }
            if !self.collaborative {
                if let Some(&i) = lex.distinct_items.get(w).filter(|&&i| foreign(i)) {
                    bad.push((
                        Rule::ForeignToken,
                        format!(
                        "decision {d}: a text names item {w} ({}), which only other users consumed",
                        i.0
                    ),
                    ));
                }
            }
        }
        if !self.collaborative {
            for i in lex.titles.found_in(text) {
                if foreign(i) {
                    let title = ctx.catalog.get(i).map_or("", |it| it.title.as_str());
                    bad.push((Rule::ForeignTitle, format!(
                        "decision {d}: a text mentions \"{title}\" (item {}), which only other users consumed",
                        i.0
                    )));
                }
            }
        }
    }
}

/// An entry's texts: its text, and its evidence path's node ids and
/// relations.
fn entry_texts(e: &ContextEntry) -> impl Iterator<Item = &str> {
    let path = e.path.iter().flat_map(|p| {
        p.nodes
            .iter()
            .map(MemoryId::as_str)
            .chain(p.relations.iter().map(String::as_str))
    });
    std::iter::once(e.text.as_str()).chain(path)
}

impl Policy for Guard {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn observe(
        &mut self,
        ctx: &PolicyCtx<'_>,
        e: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.seen.push(*e);
        if let Some(n) = self.audience.get_mut(e.item.index()) {
            *n += 1;
        }
        if let Some(own) = self.own.get_mut(e.user.index()) {
            own.insert(e.item);
        }
        self.inner.observe(ctx, e)
    }
    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        self.check_leaks(ctx, q);
        let out = self.inner.recall(ctx, q)?;
        self.check_isolation(ctx, q, &out);
        Ok(out)
    }
    fn feedback(
        &mut self,
        ctx: &PolicyCtx<'_>,
        f: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        if !self.evolving {
            self.flag(
                Rule::Feedback,
                format!(
                    "feedback of decision {} under the retrospective protocol",
                    f.decision_id
                ),
            );
        }
        if f.observed_at < f.decided_at || ctx.now < f.observed_at {
            self.flag(
                Rule::Feedback,
                format!(
                    "feedback of decision {} arrived before its outcome was visible",
                    f.decision_id
                ),
            );
        }
        let visible = self.truth.get(f.observed_at.0 as usize).copied();
        if let Some(item) = f.outcome.item {
            if f.user.zip(Some(item)) != visible {
                self.flag(
                    Rule::Feedback,
                    format!(
                        "feedback of decision {} names item {}, not what became visible at {}",
                        f.decision_id, item.0, f.observed_at
                    ),
                );
            }
        }
        self.inner.feedback(ctx, f)
    }
    fn maintain(
        &mut self,
        ctx: &PolicyCtx<'_>,
        t: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.inner.maintain(ctx, t)
    }
    fn stats(&self) -> serde_json::Value {
        self.inner.stats()
    }
}

/// A model that answers every call with text that is not JSON.
struct Garbage;

impl LanguageModel for Garbage {
    fn id(&self) -> String {
        "garbage".into()
    }
    fn complete(&self, _: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Ok(ChatResponse {
            text: "I would rather not answer in JSON today.".into(),
            usage: Usage::default(),
        })
    }
}

/// A model whose server is down.
struct Dead;

impl LanguageModel for Dead {
    fn id(&self) -> String {
        "dead".into()
    }
    fn complete(&self, _: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Err(LlmError::Transient {
            message: "connection refused".into(),
            retry_after_ms: None,
        })
    }
}

/// One guarded run: the run, what the guard flagged and what it checked.
struct Outcome {
    run: PolicyRun,
    tripped: BTreeMap<Rule, usize>,
    violations: Vec<String>,
    checked: Checked,
}

/// Everything a guarded run needs besides the policy.
struct Bench<'p, 'd> {
    plan: &'p Plan<'d>,
    decider: Decider,
    lexicon: Arc<Lexicon>,
}

impl<'p, 'd> Bench<'p, 'd> {
    fn new(plan: &'p Plan<'d>) -> Self {
        Self {
            plan,
            decider: Decider::new(plan, Arc::new(TestEmbedder::default())).unwrap(),
            lexicon: Arc::new(Lexicon::new(plan.dataset)),
        }
    }

    /// Run `inner` (labelled `label`) inside a fresh [`Guard`].
    fn guarded(
        &self,
        inner: Box<dyn Policy>,
        label: &str,
        collaborative: bool,
        hub: &LlmHub,
    ) -> Result<Outcome, EvalError> {
        let mut guard = Guard::new(inner, collaborative, self.plan, self.lexicon.clone());
        let run = run_policy(self.plan, &mut guard, label, &self.decider, hub, &|_| {})?;
        Ok(Outcome {
            run,
            tripped: guard.tripped,
            violations: guard.violations,
            checked: guard.checked,
        })
    }

    /// Run `fam`, judged as collaborative when `collaborative` says so.
    fn family_as(
        &self,
        fam: &Family,
        collaborative: bool,
        hub: Arc<LlmHub>,
    ) -> Result<Outcome, EvalError> {
        let deps = PolicyDeps {
            embedder: Arc::new(TestEmbedder::default()),
            llm: hub.clone(),
            seed: self.plan.config.seed,
        };
        let build = |source| EvalError::Policy {
            policy: fam.name.into(),
            phase: "build",
            source,
        };
        let spec = PolicySpec::parse(fam.name).map_err(build)?;
        let inner = registry::build(&spec, &deps).map_err(build)?;
        self.guarded(inner, fam.name, collaborative, &hub)
    }

    /// Run `fam` as its capabilities declare.
    fn family(&self, fam: &Family, hub: Arc<LlmHub>) -> Result<Outcome, EvalError> {
        self.family_as(fam, fam.caps.collaborative, hub)
    }
}

fn ranking_families() -> Vec<&'static Family> {
    FAMILIES
        .iter()
        .filter(|f| f.serves(evomem_core::DecisionTag::Rank))
        .collect()
}

/// Retrospective: every op was caused only by interactions the protocol
/// showed (never a test interaction, never a user's own target or later).
fn sources_visible(plan: &Plan<'_>, run: &PolicyRun) -> Vec<String> {
    let mut bad = Vec::new();
    for lo in &run.ops {
        for t in &lo.provenance.sources {
            let shown = plan
                .dataset
                .interactions
                .get(t.0 as usize)
                .is_some_and(|i| plan.retrospective_allows(i));
            if !shown && bad.len() < 10 {
                bad.push(format!(
                    "op seq {} ({}) was caused by the hidden interaction at {t}",
                    lo.seq, lo.provenance.label
                ));
            }
        }
    }
    bad
}

fn replayed(run: &PolicyRun) -> Result<MemoryState, String> {
    let mut m = MemoryState::new();
    for lo in &run.ops {
        m.apply(&lo.op, lo.provenance.logical_time).map_err(|e| {
            format!(
                "op seq {} ({}) invalid on replay: {e}",
                lo.seq,
                lo.op.name()
            )
        })?;
    }
    Ok(m)
}

/// Every check of the module docs, for every ranking family, on one plan.
fn conform(data: &Dataset, cfg: &ProtocolConfig, what: &str) {
    let plan = Plan::build(data, cfg).unwrap();
    let bench = Bench::new(&plan);
    // The title rule has titles to look for.
    assert!(bench.lexicon.titles.len() > 0, "{what}: no precise title");
    let mut failures = Vec::new();
    let ranking = ranking_families();
    assert!(ranking.len() >= 7, "the family table lost rows");
    let mut texts = 0;
    for fam in ranking {
        let offline = || Arc::new(LlmHub::offline());
        let a = bench.family(fam, offline()).unwrap();
        let b = bench.family(fam, offline()).unwrap();
        let name = fam.name;
        if a.run.ops != b.run.ops || a.run.decisions != b.run.decisions {
            failures.push(format!("{what}/{name}: two runs with one seed differ"));
        }
        if a.run.metrics() != b.run.metrics() {
            failures.push(format!("{what}/{name}: metrics differ between two runs"));
        }
        // The guard checked every decision: its checks ran.
        if a.checked.recalls != plan.decisions.len() {
            failures.push(format!(
                "{what}/{name}: the guard saw {} recalls for {} decisions",
                a.checked.recalls,
                plan.decisions.len()
            ));
        }
        texts += a.checked.texts;
        for (rule, n) in &a.tripped {
            failures.push(format!("{what}/{name}: {rule:?} tripped {n} times"));
        }
        for v in &a.violations {
            failures.push(format!("{what}/{name}: {v}"));
        }
        if plan.config.protocol == ProtocolKind::Retrospective {
            for v in sources_visible(&plan, &a.run) {
                failures.push(format!("{what}/{name}: {v}"));
            }
        }
        match replayed(&a.run) {
            Err(e) => failures.push(format!("{what}/{name}: {e}")),
            Ok(m) if m != a.run.state => {
                failures.push(format!("{what}/{name}: replaying the log != live memory"))
            }
            Ok(_) => {}
        }
        if fam.caps.writes_memory && a.run.ops.is_empty() {
            failures.push(format!("{what}/{name}: declares memory but wrote no op"));
        }
        // An LLM that never answers usable JSON gives exactly the offline result.
        let garbage =
            Arc::new(LlmHub::with_model(Arc::new(Garbage), CacheSettings::default()).unwrap());
        let g = bench.family(fam, garbage.clone()).unwrap();
        if g.run.ops != a.run.ops || g.run.decisions != a.run.decisions {
            failures.push(format!(
                "{what}/{name}: a failing LLM did not give the offline result"
            ));
        }
        let fallbacks = garbage.accounting().totals().fallbacks;
        if fallbacks < plan.decisions.len() as u64 {
            failures.push(format!(
                "{what}/{name}: only {fallbacks} fallbacks counted for {} decisions",
                plan.decisions.len()
            ));
        }
    }
    // The text rules had text to read.
    assert!(texts > 0, "{what}: no family handed the decider any text");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_family_conforms_on_generated_data_retrospective() {
    let data = synthetic_dataset(12, 40, 14, 5);
    conform(&data, &ProtocolConfig::default(), "synthetic/retrospective");
}

#[test]
fn every_family_conforms_on_generated_data_evolving() {
    let data = synthetic_dataset(12, 40, 14, 6);
    let cfg = ProtocolConfig {
        protocol: ProtocolKind::Evolving,
        tick: 25,
        ..ProtocolConfig::default()
    };
    conform(&data, &cfg, "synthetic/evolving");
}

#[test]
fn every_family_conforms_on_50_ml100k_users() {
    let Some(dir) = shared_dataset("ml-100k") else {
        return;
    };
    let data = evomem_eval::compat::load_data(&dir, Some("recbole"))
        .unwrap()
        .dataset;
    let cfg = ProtocolConfig {
        users: UserSelection::Count(50),
        ..ProtocolConfig::default()
    };
    conform(&data, &cfg, "ml-100k/50");
}

#[test]
fn a_backend_that_fails_every_call_fails_the_run() {
    let data = synthetic_dataset(8, 30, 10, 2);
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    let bench = Bench::new(&plan);
    for fam in ranking_families() {
        let dead = Arc::new(LlmHub::with_model(Arc::new(Dead), CacheSettings::default()).unwrap());
        let err = bench
            .family(fam, dead.clone())
            .err()
            .unwrap_or_else(|| panic!("{}: a dead backend finished the run", fam.name));
        let msg = err.to_string();
        assert!(msg.contains("in a row"), "{}: {msg}", fam.name);
        let fallbacks = dead.accounting().totals().fallbacks;
        assert!(
            fallbacks < evomem_llm::DEFAULT_MAX_CONSECUTIVE_FAILURES as u64,
            "{}: {fallbacks} fallbacks before failing",
            fam.name
        );
    }
}

/// A collaborative family's recall really hands the decider other users'
/// evidence, and the guard lets it through only because the family
/// declares it: judged as a private family, its own output breaks rules 4
/// and 5. So the item and title rules bite on real policy output, not only
/// on the gossip below. (AtomRec's evidence names items by title only, so
/// the token rule is left to the gossip.)
#[test]
fn collaborative_output_breaks_the_private_rules() {
    let data = synthetic_dataset(12, 40, 14, 5);
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    let bench = Bench::new(&plan);
    let collaborative: Vec<&Family> = ranking_families()
        .into_iter()
        .filter(|f| f.caps.collaborative)
        .collect();
    assert!(
        !collaborative.is_empty(),
        "no collaborative family to check"
    );
    for fam in collaborative {
        let declared = bench.family(fam, Arc::new(LlmHub::offline())).unwrap();
        assert!(declared.violations.is_empty(), "{:?}", declared.violations);
        assert!(
            declared.checked.anonymised_foreign > 0,
            "{}: no anonymised evidence about other users' items",
            fam.name
        );
        let private = bench
            .family_as(fam, false, Arc::new(LlmHub::offline()))
            .unwrap();
        for rule in [
            Rule::ForeignItem,
            Rule::ForeignTitle,
            Rule::SharedRecord,
            Rule::Anonymised,
        ] {
            assert!(
                private.tripped.contains_key(&rule),
                "{}: judged private, nothing tripped {rule:?}: {:?}",
                fam.name,
                private.tripped
            );
        }
        // What a private family may never do, a collaborative one did not do
        // either.
        for rule in [
            Rule::OtherRecord,
            Rule::OtherRecordId,
            Rule::OtherNamespace,
            Rule::OtherToken,
            Rule::OwnRecordForeignItem,
        ] {
            assert!(!private.tripped.contains_key(&rule), "{rule:?}");
        }
    }
}

/// How a [`Gossip`] breaks isolation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tell {
    /// An entry about a foreign item, citing no record.
    ForeignItem,
    /// A text with a foreign item's title.
    ForeignTitle,
    /// A text with a foreign item's token.
    ForeignToken,
    /// A text with another user's token.
    UserToken,
    /// A text with another user's namespace.
    UserNamespace,
    /// An entry citing another user's record.
    OtherRecord,
    /// A text with another user's record id.
    OtherRecordId,
    /// An entry citing the user's own record, about a foreign item.
    OwnRecordForeignItem,
}

/// A policy that writes one record per interaction into its user's
/// namespace, and at every recall tells the decider one thing about another
/// user (their interaction with an item this user never had).
struct Gossip {
    tell: Tell,
    seen: Vec<Interaction>,
}

fn gossip_id(token: &str, t: LogicalTime) -> MemoryId {
    MemoryId::new(format!("gossip:{token}:{}", t.0))
}

impl Policy for Gossip {
    fn name(&self) -> &str {
        "gossip"
    }
    fn observe(
        &mut self,
        ctx: &PolicyCtx<'_>,
        e: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        self.seen.push(*e);
        let token = ctx.user_token(e.user);
        let record = MemoryRecord::new(
            gossip_id(&token, e.time),
            Namespace::user(&token),
            RecordKind::Event,
            format!("consumed item {}", e.item.0),
            e.time,
        );
        Ok(vec![PlannedOp::new(
            MemoryOp::Create { record },
            "gossip",
            "remember",
        )])
    }
    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        let mut context = evomem_core::DecisionContext::default();
        let mine: Vec<&Interaction> = self.seen.iter().filter(|s| s.user == q.user).collect();
        let theirs = self.seen.iter().find(|s| {
            s.user != q.user
                && !mine.iter().any(|m| m.item == s.item)
                && !q.candidates().contains(&s.item)
        });
        let (Some(theirs), Some(own)) = (theirs, mine.first()) else {
            return Ok(Recall {
                context,
                trace: UsageTrace::for_query(q),
            });
        };
        let item = ctx.catalog.get(theirs.item);
        let title = item.map_or("", |i| i.title.as_str());
        let token = item.map_or("", |i| i.token.as_str());
        let other = ctx.user_token(theirs.user);
        let entry = |memory: Option<MemoryId>, item: Option<ItemId>, text: String| ContextEntry {
            memory,
            item,
            text,
            weight: 1.0,
            embedding: None,
            path: None,
        };
        context.entries.push(match self.tell {
            Tell::ForeignItem => entry(None, Some(theirs.item), "someone liked this".into()),
            Tell::ForeignTitle => entry(None, None, format!("you may like {title}.")),
            Tell::ForeignToken => entry(None, None, format!("try {token} next")),
            Tell::UserToken => entry(None, None, format!("{other} liked it")),
            Tell::UserNamespace => entry(None, None, format!("from user:{other}")),
            Tell::OtherRecord => entry(
                Some(gossip_id(&other, theirs.time)),
                None,
                "a neighbour".into(),
            ),
            Tell::OtherRecordId => entry(
                None,
                None,
                format!("see [{}]", gossip_id(&other, theirs.time)),
            ),
            Tell::OwnRecordForeignItem => entry(
                Some(gossip_id(&ctx.user_token(q.user), own.time)),
                Some(theirs.item),
                "you, sort of".into(),
            ),
        });
        Ok(Recall {
            context,
            trace: UsageTrace::for_query(q),
        })
    }
}

/// Each way of telling on another user trips the rule it breaks, and
/// nothing else; a collaborative family is allowed exactly the anonymised
/// ones (an entry about a foreign item that cites no record, its title and
/// token in text).
#[test]
fn guard_catches_a_policy_that_gossips() {
    let data = synthetic_dataset(8, 40, 10, 3);
    let plan = Plan::build(&data, &ProtocolConfig::default()).unwrap();
    let bench = Bench::new(&plan);
    let hub = LlmHub::offline();
    // (tell, the rules it breaks, also for a collaborative family); a
    // namespace or record id that holds a precise token names it too.
    let cases: [(Tell, &[Rule], bool); 8] = [
        (Tell::ForeignItem, &[Rule::ForeignItem], false),
        (Tell::ForeignTitle, &[Rule::ForeignTitle], false),
        (Tell::ForeignToken, &[Rule::ForeignToken], false),
        (Tell::UserToken, &[Rule::OtherToken], true),
        (
            Tell::UserNamespace,
            &[Rule::OtherNamespace, Rule::OtherToken],
            true,
        ),
        (Tell::OtherRecord, &[Rule::OtherRecord], true),
        (
            Tell::OtherRecordId,
            &[Rule::OtherRecordId, Rule::OtherToken],
            true,
        ),
        (
            Tell::OwnRecordForeignItem,
            &[Rule::OwnRecordForeignItem],
            true,
        ),
    ];
    for (tell, rules, collab_too) in cases {
        for collaborative in [false, true] {
            let gossip = Box::new(Gossip {
                tell,
                seen: Vec::new(),
            });
            let out = bench
                .guarded(gossip, "gossip", collaborative, &hub)
                .unwrap();
            assert_eq!(out.checked.recalls, plan.decisions.len());
            let expected: &[Rule] = if collab_too || !collaborative {
                rules
            } else {
                &[]
            };
            let got: Vec<Rule> = out.tripped.keys().copied().collect();
            assert_eq!(
                got, expected,
                "{tell:?}, collaborative={collaborative}: {:?}",
                out.violations
            );
            for rule in expected {
                // Every decision told on someone.
                assert_eq!(out.tripped[rule], plan.decisions.len(), "{tell:?}");
            }
        }
    }
}
