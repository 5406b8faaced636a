//! TLS to PostgreSQL against the test server, which `scripts/ci-postgres.sh`
//! starts with `ssl=on` and a certificate for `localhost` and `127.0.0.1`
//! signed by a CA of its own (`EVOMEM_TEST_PG_CA`): `verify-full` with that
//! CA and `require` connect over TLS (the server's `pg_stat_ssl` says so),
//! `verify-full` with another CA is refused, and `disable` is plain text.

use crate::common::*;
use evomem_store::PostgresStore;

/// How many of the server's sessions on the test database use TLS.
fn tls_sessions(url: &str) -> i64 {
    let mut plain = postgres::Client::connect(url, postgres::NoTls).unwrap();
    plain
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE s.ssl AND a.datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0)
}

/// Wait (up to 10 s) for the TLS sessions to be `n` again: a closed
/// session's server process leaves `pg_stat_activity` a moment after.
fn settle(url: &str, n: i64) {
    for _ in 0..200 {
        if tls_sessions(url) == n {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("TLS sessions did not return to {n}");
}

#[test]
fn postgres_connects_over_tls_when_asked_and_checks_the_ca() {
    let name = "postgres_connects_over_tls_when_asked_and_checks_the_ca";
    let Some(url) = pg_url(name) else {
        return;
    };
    let ca = match std::env::var("EVOMEM_TEST_PG_CA") {
        Ok(c) if !c.is_empty() => c,
        _ => {
            if std::env::var_os("CI").is_some() {
                panic!("{name}: EVOMEM_TEST_PG_CA is not set but CI is; run `eval \"$(scripts/ci-postgres.sh)\"` on a fresh server");
            }
            eprintln!(
                "\n!!!!!!!! {name}: EVOMEM_TEST_PG_CA is not set; TLS checks SKIPPED !!!!!!!!\n"
            );
            return;
        }
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let schema = "evomem_pgtls";
    let before = tls_sessions(&url);
    for mode in [
        format!("sslmode=verify-full&sslrootcert={ca}"),
        "sslmode=require".to_string(),
    ] {
        let s = PostgresStore::connect(&format!("{url}{sep}{mode}"), schema)
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(tls_sessions(&url), before + 1, "{mode}: not over TLS");
        drop(s);
        settle(&url, before);
    }
    let plain = PostgresStore::connect(&format!("{url}{sep}sslmode=disable"), schema).unwrap();
    assert_eq!(tls_sessions(&url), before, "sslmode=disable is plain text");
    drop(plain);

    // The server's own certificate is no CA of its chain: refused.
    let wrong = std::path::Path::new(&ca).with_file_name("server.crt");
    let e = PostgresStore::connect(
        &format!(
            "{url}{sep}sslmode=verify-full&sslrootcert={}",
            wrong.display()
        ),
        schema,
    )
    .unwrap_err();
    let msg = format!("{e:?}");
    assert!(
        msg.to_lowercase().contains("certificate") || msg.contains("UnknownIssuer"),
        "{msg}"
    );
    PostgresStore::drop_schema(&url, schema).unwrap();
}
