//! Property: through HTTP, with a random number of tenants, random users
//! and random calls of every route (memories, search, list, get, update,
//! history, delete, user deletion, events, recommend, feedback), no answer
//! ever holds another tenant's or another user's data, and every status and
//! every read is exactly what a model of the (tenant, user) sets predicts.
//!
//! Users inside one tenant are not a trust boundary (docs/service.md): a
//! key may name any user of its tenant. What is checked across users of a
//! tenant is that one user's reads return only that user's data.

use crate::common::*;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

const USERS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Add {
        tenant: usize,
        user: usize,
        n: usize,
    },
    Search {
        tenant: usize,
        user: usize,
    },
    List {
        tenant: usize,
        user: usize,
    },
    Get {
        tenant: usize,
        pick: usize,
    },
    Update {
        tenant: usize,
        pick: usize,
    },
    History {
        tenant: usize,
        pick: usize,
    },
    Delete {
        tenant: usize,
        pick: usize,
    },
    DeleteUser {
        tenant: usize,
        user: usize,
    },
    Events {
        tenant: usize,
        user: usize,
        item: usize,
    },
    Recommend {
        tenant: usize,
        user: usize,
    },
    Feedback {
        tenant: usize,
        pick: usize,
    },
}

fn op(tenants: usize) -> impl Strategy<Value = Op> {
    let t = 0..tenants;
    let u = 0..USERS;
    prop_oneof![
        3 => (t.clone(), u.clone(), 1..4usize).prop_map(|(tenant, user, n)| Op::Add { tenant, user, n }),
        2 => (t.clone(), u.clone()).prop_map(|(tenant, user)| Op::Search { tenant, user }),
        1 => (t.clone(), u.clone()).prop_map(|(tenant, user)| Op::List { tenant, user }),
        2 => (t.clone(), 0..50usize).prop_map(|(tenant, pick)| Op::Get { tenant, pick }),
        1 => (t.clone(), 0..50usize).prop_map(|(tenant, pick)| Op::Update { tenant, pick }),
        1 => (t.clone(), 0..50usize).prop_map(|(tenant, pick)| Op::History { tenant, pick }),
        1 => (t.clone(), 0..50usize).prop_map(|(tenant, pick)| Op::Delete { tenant, pick }),
        1 => (t.clone(), u.clone()).prop_map(|(tenant, user)| Op::DeleteUser { tenant, user }),
        2 => (t.clone(), u.clone(), 0..4usize).prop_map(|(tenant, user, item)| Op::Events { tenant, user, item }),
        2 => (t.clone(), u).prop_map(|(tenant, user)| Op::Recommend { tenant, user }),
        1 => (t, 0..50usize).prop_map(|(tenant, pick)| Op::Feedback { tenant, pick }),
    ]
}

fn case() -> impl Strategy<Value = (usize, Vec<Op>)> {
    (2..5usize).prop_flat_map(|n| (Just(n), proptest::collection::vec(op(n), 5..40)))
}

fn item(i: usize) -> Value {
    json!({"id": format!("i{i}"), "title": format!("Record {i}"), "categories": [if i.is_multiple_of(2) { "Jazz" } else { "Metal" }]})
}

/// No id or text of another (tenant, user) anywhere in `v`.
fn assert_only_own(
    v: &Value,
    own: (usize, usize),
    model: &BTreeMap<(usize, usize), BTreeMap<String, String>>,
    what: &str,
) {
    let text = v.to_string();
    for (&(t, u), mems) in model {
        if (t, u) == own {
            continue;
        }
        for (id, body) in mems {
            assert!(
                !text.contains(id.as_str()),
                "{what} for t{}/u{} holds memory {id} of t{t}/u{u}: {text}",
                own.0,
                own.1
            );
            assert!(
                !text.contains(body.as_str()),
                "{what} for t{}/u{} holds text of t{t}/u{u}: {text}",
                own.0,
                own.1
            );
        }
    }
    for u in 0..USERS {
        if u != own.1 {
            assert!(
                !text.contains(&format!("user:u{u}:")),
                "{what} for t{}/u{} holds a record of u{u}: {text}",
                own.0,
                own.1
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
    #[test]
    fn no_cross_tenant_or_cross_user_result((tenants, ops) in case()) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let dir = tempfile::tempdir().unwrap();
            let (s, keys) = start_tenants(config(dir.path(), None), tenants).await;
            let key = |t: usize| Some(keys[t].as_str());
            // model: (tenant, user) -> id -> text
            let mut model: BTreeMap<(usize, usize), BTreeMap<String, String>> = BTreeMap::new();
            // Users with anything stored (memories or loop records).
            let mut known: BTreeSet<(usize, usize)> = BTreeSet::new();
            // Items each tenant registered.
            let mut items: BTreeSet<(usize, usize)> = BTreeSet::new();
            let mut all_ids: Vec<(usize, usize, String)> = Vec::new();
            // (tenant, user, decision id)
            let mut decisions: Vec<(usize, usize, u64)> = Vec::new();
            let mut counter = 0;
            for o in ops {
                match o {
                    Op::Add { tenant, user, n } => {
                        let mems: Vec<_> = (0..n).map(|_| { counter += 1; json!({"text": format!("t{tenant} u{user} note {counter}.")}) }).collect();
                        let (st, v) = s.call("POST", "/v1/memories", key(tenant), Some(json!({"user_id": format!("u{user}"), "memories": mems}))).await;
                        assert_eq!(st, 201, "{v}");
                        for m in v["memories"].as_array().unwrap() {
                            let id = m["id"].as_str().unwrap().to_string();
                            model.entry((tenant, user)).or_default().insert(id.clone(), m["text"].as_str().unwrap().to_string());
                            all_ids.push((tenant, user, id));
                        }
                        known.insert((tenant, user));
                    }
                    Op::Search { tenant, user } => {
                        // k = exactly the user's count: an index that let other
                        // users' vectors into the top k would return fewer.
                        let mine = model.get(&(tenant, user)).cloned().unwrap_or_default();
                        let k = mine.len().clamp(1, 100);
                        let (st, v) = s.call("POST", "/v1/memories/search", key(tenant), Some(json!({"user_id": format!("u{user}"), "query": "note", "k": k}))).await;
                        assert_eq!(st, 200, "{v}");
                        let got: Vec<String> = v["results"].as_array().unwrap().iter().map(|h| h["memory"]["id"].as_str().unwrap().to_string()).collect();
                        for id in &got {
                            assert!(mine.contains_key(id), "search of t{tenant}/u{user} returned foreign {id}");
                        }
                        assert_eq!(got.len(), mine.len());
                        assert_only_own(&v, (tenant, user), &model, "search");
                    }
                    Op::List { tenant, user } => {
                        let (st, v) = s.call("GET", &format!("/v1/users/u{user}/memories"), key(tenant), None).await;
                        assert_eq!(st, 200, "{v}");
                        let got: BTreeMap<String, String> = v["memories"].as_array().unwrap().iter().map(|m| (m["id"].as_str().unwrap().to_string(), m["text"].as_str().unwrap().to_string())).collect();
                        assert_eq!(got, model.get(&(tenant, user)).cloned().unwrap_or_default());
                    }
                    Op::Get { tenant, pick } | Op::Update { tenant, pick } | Op::History { tenant, pick } | Op::Delete { tenant, pick } => {
                        if all_ids.is_empty() { continue; }
                        let (owner_t, owner_u, id) = all_ids[pick % all_ids.len()].clone();
                        let live = model.get(&(owner_t, owner_u)).is_some_and(|m| m.contains_key(&id));
                        let mine = owner_t == tenant;
                        let (st, v) = match &o {
                            Op::Get { .. } => s.call("GET", &format!("/v1/memories/{id}"), key(tenant), None).await,
                            Op::Update { .. } => s.call("PATCH", &format!("/v1/memories/{id}"), key(tenant), Some(json!({"metadata": {"by": tenant}}))).await,
                            Op::History { .. } => s.call("GET", &format!("/v1/memories/{id}/history"), key(tenant), None).await,
                            _ => s.call("DELETE", &format!("/v1/memories/{id}"), key(tenant), None).await,
                        };
                        // History outlives a soft delete, within the tenant.
                        let history_left = matches!(o, Op::History { .. }) && mine && known.contains(&(owner_t, owner_u));
                        if mine && (live || history_left) {
                            assert_eq!(st, 200, "{o:?}: {v}");
                            assert_only_own(&v, (owner_t, owner_u), &model, "memory route");
                        } else {
                            assert_eq!(st, 404, "{o:?}: tenant {tenant} reached {id} of tenant {owner_t}: {v}");
                        }
                        if matches!(o, Op::Delete { .. }) && mine && live {
                            model.get_mut(&(owner_t, owner_u)).unwrap().remove(&id);
                        }
                    }
                    Op::DeleteUser { tenant, user } => {
                        let (st, v) = s.call("DELETE", &format!("/v1/users/u{user}"), key(tenant), None).await;
                        if known.remove(&(tenant, user)) {
                            assert_eq!(st, 200, "{v}");
                        } else {
                            assert_eq!(st, 404, "{v}");
                        }
                        model.remove(&(tenant, user));
                        decisions.retain(|d| (d.0, d.1) != (tenant, user));
                        all_ids.retain(|(t, u, _)| (*t, *u) != (tenant, user));
                    }
                    Op::Events { tenant, user, item: i } => {
                        let (st, v) = s.call("POST", "/v1/events", key(tenant), Some(json!({"user_id": format!("u{user}"), "events": [{"item": item(i), "rating": 5}]}))).await;
                        assert_eq!(st, 200, "{v}");
                        items.insert((tenant, i));
                        known.insert((tenant, user));
                    }
                    Op::Recommend { tenant, user } => {
                        let (st, v) = s.call("POST", "/v1/recommend", key(tenant), Some(json!({"user_id": format!("u{user}"), "candidates": [item(0), item(1)]}))).await;
                        assert_eq!(st, 200, "{v}");
                        assert_only_own(&v, (tenant, user), &model, "recommend");
                        items.insert((tenant, 0));
                        items.insert((tenant, 1));
                        known.insert((tenant, user));
                        decisions.push((tenant, user, v["decision_id"].as_u64().unwrap()));
                    }
                    Op::Feedback { tenant, pick } => {
                        if decisions.is_empty() { continue; }
                        let (owner_t, _, id) = decisions[pick % decisions.len()];
                        let (st, v) = s.call("POST", "/v1/feedback", key(tenant), Some(json!({"decision_id": id, "reward": 1.0}))).await;
                        if owner_t == tenant {
                            assert_eq!(st, 200, "{v}");
                        } else {
                            assert_eq!(st, 404, "tenant {tenant} gave feedback on a decision of tenant {owner_t}: {v}");
                        }
                    }
                }
            }
            s.stop().await;
        });
    }
}
