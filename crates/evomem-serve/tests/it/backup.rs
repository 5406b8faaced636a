//! `backup` while the service takes writes, `restore` into a fresh data
//! folder, and `check` on both: the restored tenants agree with
//! themselves, hold every memory acknowledged before the backup began, and
//! a backup taken after the writes stopped restores to exactly the live
//! store.

use crate::common::*;
use evomem_serve::auth::KeyRing;
use evomem_serve::tenant::Shared;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn shared(config: evomem_serve::ServeConfig) -> Shared {
    Shared {
        config,
        embedder: Arc::new(evomem_embed::HashingEmbedder::new(64)),
        hub: Arc::new(evomem_llm::LlmHub::offline()),
        seed: 42,
        metrics: Arc::default(),
        embedders: Default::default(),
    }
}

fn keys() -> KeyRing {
    KeyRing::from_plain([(KEY_A, "alpha"), (KEY_B, "beta")])
}

/// `serve check` on a data folder: memories per tenant.
fn check(dir: &std::path::Path) -> Vec<(String, usize)> {
    evomem_serve::check(shared(config(dir, None)), &keys()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_under_writes_restores_into_a_fresh_folder_that_checks() {
    let live = tempfile::tempdir().unwrap();
    let s = Arc::new(start(config(live.path(), None)).await);
    for key in [KEY_A, KEY_B] {
        let (st, _) = s
            .call(
                "POST",
                "/v1/memories",
                Some(key),
                Some(json!({"user_id": "u", "memories": [{"text": "seed"}]})),
            )
            .await;
        assert_eq!(st, 201);
    }
    let acked = Arc::new(AtomicUsize::new(1));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (s, acked, stop) = (s.clone(), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let (st, v) = s
                    .call(
                        "POST",
                        "/v1/memories",
                        Some(KEY_A),
                        Some(json!({"user_id": "u", "memories": [{"text": format!("note {i}")}]})),
                    )
                    .await;
                assert_eq!(st, 201, "{v}");
                acked.fetch_add(1, Ordering::SeqCst);
                i += 1;
            }
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let backups = tempfile::tempdir().unwrap();
    let out = backups.path().join("during");
    let before = acked.load(Ordering::SeqCst);
    let cfg = config(live.path(), None);
    let o = out.clone();
    let copied =
        tokio::task::spawn_blocking(move || evomem_serve::backup::backup(&cfg, &keys(), None, &o))
            .await
            .unwrap()
            .unwrap();
    assert_eq!(copied.len(), 2);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    let after_writes = acked.load(Ordering::SeqCst);
    assert!(after_writes > before, "no write ran during the backup");

    // Restore the backup taken under writes into a fresh folder.
    let fresh = tempfile::tempdir().unwrap();
    let data = fresh.path().join("data");
    let restored = evomem_serve::backup::restore(&out, &data, None).unwrap();
    assert_eq!(restored.len(), 2);
    let got = check(&data);
    let alpha = got.iter().find(|(t, _)| t == "alpha").unwrap().1;
    assert!(
        alpha >= before && alpha <= after_writes,
        "restored {alpha} memories; {before} acknowledged before the backup, {after_writes} in all"
    );

    // A backup after the writes stopped restores to exactly the live store.
    let quiet = backups.path().join("quiet.sqlite");
    let cfg = config(live.path(), None);
    evomem_serve::backup::backup(&cfg, &keys(), Some("alpha"), &quiet).unwrap();
    let data2 = fresh.path().join("data2");
    let r = evomem_serve::backup::restore(&quiet, &data2, Some("alpha")).unwrap();
    assert_eq!(r[0].tenant, "alpha");
    Arc::try_unwrap(s).ok().unwrap().stop().await;
    let live_check = check(live.path());
    let live_alpha = live_check.iter().find(|(t, _)| t == "alpha").unwrap().1;
    assert_eq!(live_alpha, after_writes);
    let restored_alpha = check(&data2)
        .into_iter()
        .find(|(t, _)| t == "alpha")
        .unwrap()
        .1;
    assert_eq!(restored_alpha, live_alpha);

    // Restore never overwrites a tenant.
    let e = evomem_serve::backup::restore(&quiet, &data2, Some("alpha"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("already exists"), "{e}");
}
