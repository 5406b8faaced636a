//! Keys revoked, rotated or added while the service runs take effect
//! without a restart; the keys file and the tenant's database are private
//! to their owner.

use crate::common::*;
use evomem_serve::auth;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_and_rotate_take_effect_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.toml");
    let a = auth::add_key(&path, "alpha", "first").unwrap();
    let b = auth::add_key(&path, "alpha", "second").unwrap();
    let live = auth::LiveKeys::watch(&path, 0).unwrap();
    let s = start_live(
        config(dir.path(), None),
        Arc::new(evomem_embed::HashingEmbedder::new(64)),
        live,
    )
    .await;
    let get = |k: String| {
        let s = &s;
        async move {
            s.call("GET", "/v1/users/u/memories", Some(&k), None)
                .await
                .0
        }
    };
    assert_eq!(get(a.clone()).await, 200);
    assert_eq!(get(b.clone()).await, 200);
    let ids: Vec<String> = auth::list_keys(&path)
        .unwrap()
        .iter()
        .map(|k| auth::key_id(k).to_string())
        .collect();
    auth::revoke_key(&path, &ids[0]).unwrap();
    assert_eq!(get(a.clone()).await, 401, "revoked key still works");
    assert_eq!(get(b.clone()).await, 200);
    let (c, _) = auth::rotate_key(&path, &ids[1]).unwrap();
    assert_eq!(get(b.clone()).await, 401, "rotated-out key still works");
    assert_eq!(get(c.clone()).await, 200, "the new key is refused");
    let d = auth::add_key(&path, "alpha", "third").unwrap();
    assert_eq!(get(d).await, 200, "a key added while running is refused");
    // A tenant whose first key is added while the service runs opens on
    // its first request (it was refused until a restart before tenants
    // opened on demand).
    let e = auth::add_key(&path, "gamma", "first").unwrap();
    assert_eq!(get(e).await, 200, "a new tenant's key is refused");
    s.stop().await;
    #[cfg(unix)]
    {
        use evomem_serve::private_file::mode;
        assert_eq!(mode(&path).unwrap(), Some(0o600), "keys file");
        assert_eq!(
            mode(&dir.path().join("alpha.sqlite")).unwrap(),
            Some(0o600),
            "database file"
        );
    }
}
