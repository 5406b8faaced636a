//! Property: through HTTP, with random tenants, users and operations, no
//! read ever returns a memory of another tenant or another user, and every
//! read returns exactly what a model of the (tenant, user) sets predicts.

use crate::common::*;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;

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
    Delete {
        tenant: usize,
        pick: usize,
    },
    DeleteUser {
        tenant: usize,
        user: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let t = 0..2usize;
    let u = 0..3usize;
    prop_oneof![
        3 => (t.clone(), u.clone(), 1..4usize).prop_map(|(tenant, user, n)| Op::Add { tenant, user, n }),
        2 => (t.clone(), u.clone()).prop_map(|(tenant, user)| Op::Search { tenant, user }),
        1 => (t.clone(), u.clone()).prop_map(|(tenant, user)| Op::List { tenant, user }),
        2 => (t.clone(), 0..50usize).prop_map(|(tenant, pick)| Op::Get { tenant, pick }),
        1 => (t.clone(), 0..50usize).prop_map(|(tenant, pick)| Op::Delete { tenant, pick }),
        1 => (t, u).prop_map(|(tenant, user)| Op::DeleteUser { tenant, user }),
    ]
}

const KEYS: [&str; 2] = [KEY_A, KEY_B];

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn no_cross_tenant_or_cross_user_result(ops in proptest::collection::vec(op(), 5..30)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let dir = tempfile::tempdir().unwrap();
            let s = start(config(dir.path(), None)).await;
            // model: (tenant, user) -> id -> text
            let mut model: BTreeMap<(usize, usize), BTreeMap<String, String>> = BTreeMap::new();
            let mut all_ids: Vec<(usize, usize, String)> = Vec::new();
            let mut counter = 0;
            for o in ops {
                match o {
                    Op::Add { tenant, user, n } => {
                        let mems: Vec<_> = (0..n).map(|_| { counter += 1; json!({"text": format!("t{tenant} u{user} note {counter}")}) }).collect();
                        let (st, v) = s.call("POST", "/v1/memories", Some(KEYS[tenant]), Some(json!({"user_id": format!("u{user}"), "memories": mems}))).await;
                        assert_eq!(st, 201);
                        for m in v["memories"].as_array().unwrap() {
                            let id = m["id"].as_str().unwrap().to_string();
                            model.entry((tenant, user)).or_default().insert(id.clone(), m["text"].as_str().unwrap().to_string());
                            all_ids.push((tenant, user, id));
                        }
                    }
                    Op::Search { tenant, user } => {
                        // k = exactly the user's count: an index that let other
                        // users' vectors into the top k would return fewer.
                        let mine = model.get(&(tenant, user)).cloned().unwrap_or_default();
                        let k = mine.len().clamp(1, 100);
                        let (st, v) = s.call("POST", "/v1/memories/search", Some(KEYS[tenant]), Some(json!({"user_id": format!("u{user}"), "query": "note", "k": k}))).await;
                        assert_eq!(st, 200);
                        let got: Vec<String> = v["results"].as_array().unwrap().iter().map(|h| h["memory"]["id"].as_str().unwrap().to_string()).collect();
                        for id in &got {
                            assert!(mine.contains_key(id), "search of t{tenant}/u{user} returned foreign {id}");
                        }
                        assert_eq!(got.len(), mine.len());
                    }
                    Op::List { tenant, user } => {
                        let (_, v) = s.call("GET", &format!("/v1/users/u{user}/memories"), Some(KEYS[tenant]), None).await;
                        let got: BTreeMap<String, String> = v["memories"].as_array().unwrap().iter().map(|m| (m["id"].as_str().unwrap().to_string(), m["text"].as_str().unwrap().to_string())).collect();
                        assert_eq!(got, model.get(&(tenant, user)).cloned().unwrap_or_default());
                    }
                    Op::Get { tenant, pick } => {
                        if all_ids.is_empty() { continue; }
                        let (owner_t, owner_u, id) = all_ids[pick % all_ids.len()].clone();
                        let (st, v) = s.call("GET", &format!("/v1/memories/{id}"), Some(KEYS[tenant]), None).await;
                        let live = model.get(&(owner_t, owner_u)).is_some_and(|m| m.contains_key(&id));
                        if owner_t == tenant && live {
                            assert_eq!(st, 200);
                            assert_eq!(v["user_id"], format!("u{owner_u}"));
                        } else {
                            assert_eq!(st, 404, "tenant {tenant} read {id} of tenant {owner_t}: {v}");
                        }
                    }
                    Op::Delete { tenant, pick } => {
                        if all_ids.is_empty() { continue; }
                        let (owner_t, owner_u, id) = all_ids[pick % all_ids.len()].clone();
                        let (st, _) = s.call("DELETE", &format!("/v1/memories/{id}"), Some(KEYS[tenant]), None).await;
                        let live = model.get(&(owner_t, owner_u)).is_some_and(|m| m.contains_key(&id));
                        if owner_t == tenant && live {
                            assert_eq!(st, 200);
                            model.get_mut(&(owner_t, owner_u)).unwrap().remove(&id);
                        } else {
                            assert_eq!(st, 404, "tenant {tenant} deleted {id} of tenant {owner_t}");
                        }
                    }
                    Op::DeleteUser { tenant, user } => {
                        let (st, _) = s.call("DELETE", &format!("/v1/users/u{user}"), Some(KEYS[tenant]), None).await;
                        let had = model.remove(&(tenant, user)).is_some_and(|m| !m.is_empty());
                        if had { assert_eq!(st, 200); }
                        // Another tenant's user of the same name is untouched.
                    }
                }
            }
            s.stop().await;
        });
    }
}
