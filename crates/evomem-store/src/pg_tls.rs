//! How a PostgreSQL URL's `sslmode` is honoured: TLS through rustls (the
//! `ring` provider; no OpenSSL), and no plain text to another machine
//! unless the URL says so.
//!
//! | `sslmode` | connects | certificate |
//! |---|---|---|
//! | `verify-full` | TLS, always | checked against `sslrootcert` (a PEM file of CA certificates, required), and the host name (or IP) against the certificate |
//! | `require` | TLS, always | not checked: encrypted, but not authenticated (as libpq's `require` without a root certificate) |
//! | `disable` | plain text | none; anywhere, because it was written |
//! | absent, `prefer`, `allow` | plain text to a loopback host or a local socket; **refused** to any other host | none |
//!
//! `verify-ca` (a chain check without the host name) is refused with a
//! message naming `verify-full`, and `sslrootcert` with any mode but
//! `verify-full` is refused rather than ignored. The `postgres` client
//! parses only `disable`, `prefer` and `require` itself, so [`plan`] takes
//! `sslmode` and `sslrootcert` out of the URL (the `postgres://` form or
//! the `key=value` form) before handing the rest to it.

use crate::error::StoreError;
use postgres::config::{Host, SslMode};
use postgres::{Client, NoTls};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::path::PathBuf;
use std::sync::Arc;

/// How to connect (module docs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tls {
    /// Plain text: `sslmode=disable`, or a loopback host without a mode.
    Plain,
    /// TLS without a certificate check (`require`).
    Unverified,
    /// TLS with the certificate checked against these CAs (`verify-full`).
    Verified(PathBuf),
}

/// Split `sslmode` and `sslrootcert` off `url`: the URL the `postgres`
/// client is given, and the two values.
fn take_tls_params(url: &str) -> (String, Option<String>, Option<String>) {
    let (mut mode, mut root) = (None, None);
    let mut take = |k: &str, v: &str| match k {
        "sslmode" => {
            mode = Some(v.to_string());
            true
        }
        "sslrootcert" => {
            root = Some(v.to_string());
            true
        }
        _ => false,
    };
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let rest = if is_url {
        match url.split_once('?') {
            None => url.to_string(),
            Some((base, query)) => {
                let kept: Vec<&str> = query
                    .split('&')
                    .filter(|p| {
                        let (k, v) = p.split_once('=').unwrap_or((p, ""));
                        !take(k, v)
                    })
                    .collect();
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        url.split_whitespace()
            .filter(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                !take(k.trim(), v.trim().trim_matches('\''))
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    (rest, mode, root)
}

/// Whether every host of `config` is this machine: a local socket,
/// `localhost` or a loopback address.
fn all_loopback(config: &postgres::Config) -> bool {
    config.get_hosts().iter().all(|h| match h {
        Host::Unix(_) => true,
        Host::Tcp(name) => {
            name.eq_ignore_ascii_case("localhost")
                || name
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
    })
}

/// The client configuration and TLS of `url` (module docs), or why it is
/// refused, naming the setting.
pub(crate) fn plan(url: &str) -> Result<(postgres::Config, Tls), StoreError> {
    let (rest, mode, root) = take_tls_params(url);
    let mut config: postgres::Config = rest
        .parse()
        .map_err(|e| StoreError::Config(format!("cannot parse the PostgreSQL URL: {e}")))?;
    let refuse = |m: String| Err(StoreError::Config(m));
    if root.is_some() && mode.as_deref() != Some("verify-full") {
        return refuse(format!(
            "sslrootcert is used with sslmode=verify-full only (sslmode here: {})",
            mode.as_deref().unwrap_or("not set")
        ));
    }
    let tls = match mode.as_deref() {
        Some("disable") => Tls::Plain,
        None | Some("prefer") | Some("allow") => {
            if !all_loopback(&config) {
                let hosts: Vec<String> = config
                    .get_hosts()
                    .iter()
                    .map(|h| match h {
                        Host::Tcp(s) => s.clone(),
                        Host::Unix(p) => p.display().to_string(),
                    })
                    .collect();
                return refuse(format!(
                    "PostgreSQL host {} is not this machine and the URL asks for no TLS (sslmode {}): refusing to send credentials and memories in plain text; use sslmode=verify-full&sslrootcert=CA.pem (or sslmode=require, encrypted but unauthenticated), or write sslmode=disable to accept plain text",
                    hosts.join(","),
                    mode.as_deref().unwrap_or("not set")
                ));
            }
            Tls::Plain
        }
        Some("require") => Tls::Unverified,
        Some("verify-full") => match root {
            Some(r) => Tls::Verified(PathBuf::from(r)),
            None => {
                return refuse(
                    "sslmode=verify-full needs sslrootcert=FILE (a PEM file of the CA certificates to trust)"
                        .to_string(),
                )
            }
        },
        Some("verify-ca") => {
            return refuse(
                "sslmode=verify-ca is not supported: use sslmode=verify-full (the CA and the host name are checked)"
                    .to_string(),
            )
        }
        Some(other) => {
            return refuse(format!(
                "sslmode={other} is not one of disable, prefer, require, verify-full"
            ))
        }
    };
    config.ssl_mode(match tls {
        Tls::Plain => SslMode::Disable,
        Tls::Unverified | Tls::Verified(_) => SslMode::Require,
    });
    Ok((config, tls))
}

/// The CA certificates of a PEM file, or an error naming the file.
fn roots(path: &PathBuf) -> Result<rustls::RootCertStore, StoreError> {
    let bad = |what: String| StoreError::Config(format!("sslrootcert {}: {what}", path.display()));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no certificate in the file".into()));
    }
    let mut store = rustls::RootCertStore::empty();
    for c in certs {
        store
            .add(c)
            .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
    }
    Ok(store)
}

/// Accepts any server certificate, and checks only that the handshake is
/// signed by the key it presents (`sslmode=require`).
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Connect with `config` as `tls` says; `location` names the store in
/// errors.
pub(crate) fn connect(
    config: &postgres::Config,
    tls: &Tls,
    location: &str,
) -> Result<Client, StoreError> {
    let pe = |source| StoreError::Postgres {
        location: location.to_string(),
        source,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = || {
        rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::Config(format!("TLS for {location}: {e}")))
    };
    let client_config = match tls {
        Tls::Plain => return config.connect(NoTls).map_err(pe),
        Tls::Unverified => builder()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider.clone())))
            .with_no_client_auth(),
        Tls::Verified(path) => builder()?
            .with_root_certificates(roots(path)?)
            .with_no_client_auth(),
    };
    config
        .connect(tokio_postgres_rustls::MakeRustlsConnect::new(client_config))
        .map_err(pe)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn refused(url: &str) -> String {
        match plan(url) {
            Ok((_, tls)) => panic!("{url} accepted as {tls:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Plain text only where it was written or the host is this machine;
    /// TLS where asked; every refusal names the setting.
    #[test]
    fn plain_text_goes_to_another_machine_only_when_written() {
        for url in [
            "postgres://u@127.0.0.1:5432/db",
            "postgres://u@localhost/db?sslmode=prefer",
            "postgres://u@[::1]:5432/db",
            "host=/var/run/postgresql user=u dbname=db",
            "postgres://u@db.example.org/db?sslmode=disable",
            "host=10.0.0.5 user=u sslmode=disable",
        ] {
            assert_eq!(plan(url).unwrap().1, Tls::Plain, "{url}");
        }
        for url in [
            "postgres://u@db.example.org/db",
            "postgres://u@10.0.0.5:5432/db?sslmode=prefer",
            "host=10.0.0.5 user=u",
            "postgres://u@127.0.0.1,10.0.0.5/db",
        ] {
            let e = refused(url);
            assert!(e.contains("plain text") && e.contains("sslmode"), "{e}");
        }
        let (config, tls) = plan("postgres://u@db.example.org/db?sslmode=require").unwrap();
        assert_eq!(tls, Tls::Unverified);
        assert_eq!(config.get_ssl_mode(), SslMode::Require);
        let (config, tls) = plan(
            "postgres://u@db.example.org:6543/db?connect_timeout=5&sslmode=verify-full&sslrootcert=/etc/ca.pem",
        )
        .unwrap();
        assert_eq!(tls, Tls::Verified(PathBuf::from("/etc/ca.pem")));
        assert_eq!(config.get_ports(), &[6543]);
        assert_eq!(
            config.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(5))
        );
        assert!(refused("postgres://u@h/db?sslmode=verify-full").contains("sslrootcert"));
        assert!(refused("postgres://u@h/db?sslmode=verify-ca").contains("verify-full"));
        assert!(refused("postgres://u@h/db?sslmode=require&sslrootcert=/x").contains("sslrootcert"));
        assert!(refused("postgres://u@h/db?sslmode=bogus").contains("sslmode=bogus"));
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let e = roots(&missing).unwrap_err().to_string();
        assert!(e.contains("nope.pem"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = roots(&empty).unwrap_err().to_string();
        assert!(
            e.contains("empty.pem") && e.contains("no certificate"),
            "{e}"
        );
    }
}
