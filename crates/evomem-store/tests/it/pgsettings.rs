//! PostgreSQL sessions commit durably whatever the role's or the URL's
//! default: `synchronous_commit` is set on and read back.

use crate::common::*;
use evomem_store::PostgresStore;

#[test]
fn postgres_synchronous_commit_is_on_even_when_the_url_turns_it_off() {
    let Some(url) = pg_url("postgres_synchronous_commit_is_on_even_when_the_url_turns_it_off")
    else {
        return;
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let off = format!("{url}{sep}options=-c%20synchronous_commit%3Doff");
    // The URL's setting reaches the server (a plain session sees it off).
    let mut plain = postgres::Client::connect(&off, postgres::NoTls).unwrap();
    let v: String = plain
        .query_one("SHOW synchronous_commit", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, "off", "test setup: the URL option did not apply");
    let mut s = PostgresStore::connect(&off, "evomem_pgsettings").unwrap();
    assert_eq!(
        s.durability().unwrap(),
        ("on".to_string(), "on".to_string())
    );
    drop(s);
    PostgresStore::drop_schema(&url, "evomem_pgsettings").unwrap();
}
