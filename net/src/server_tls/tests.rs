//! Loading and reloading server certificates made on the spot.

use std::path::Path;

use rcgen::{CertificateParams, KeyPair};

use super::certificate::{ReloadingCertificate, load_certified_key};
use super::*;

/// A self-signed certificate for `name` and its key, as PEM.
fn self_signed(name: &str) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let certificate = CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    (certificate.pem(), key.serialize_pem())
}

fn write_pair(dir: &Path, (cert, key): &(String, String)) -> (PathBuf, PathBuf) {
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, cert).unwrap();
    std::fs::write(&key_file, key).unwrap();
    (cert_file, key_file)
}

fn config(cert_file: PathBuf, key_file: PathBuf) -> ServerTlsConfig {
    ServerTlsConfig {
        cert_file: Some(cert_file),
        key_file: Some(key_file),
        client_ca_file: None,
        reload_interval: Duration::ZERO,
    }
}

#[test]
fn a_matching_pair_validates_and_builds_a_server_config() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = write_pair(dir.path(), &self_signed("localhost"));
    let mut tls = config(cert_file.clone(), key_file);
    assert_eq!(tls.validate(), Ok(()));
    tls.client_ca_file = Some(cert_file);
    assert_eq!(tls.validate(), Ok(()));
    let server = tls
        .server_config(Alpn::Http2, "otlp", ReloadMetrics::default())
        .unwrap();
    assert_eq!(server.alpn_protocols, [b"h2".to_vec()]);
}

#[test]
fn bad_files_are_named_by_their_setting() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = write_pair(dir.path(), &self_signed("localhost"));
    let other_key = dir.path().join("other.key");
    std::fs::write(&other_key, self_signed("other").1).unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();

    let mismatched = config(cert_file.clone(), other_key).validate().unwrap_err();
    assert_eq!(mismatched.field, "tls.key_file");
    assert!(
        mismatched.message.contains("does not match"),
        "{mismatched}"
    );

    let no_certificate = config(garbage.clone(), key_file.clone())
        .validate()
        .unwrap_err();
    assert_eq!(no_certificate.field, "tls.cert_file");
    assert!(
        no_certificate.message.ends_with("holds no certificate"),
        "{no_certificate}"
    );

    let no_key = config(cert_file.clone(), garbage.clone())
        .validate()
        .unwrap_err();
    assert_eq!(no_key.field, "tls.key_file");

    let mut bad_ca = config(cert_file, key_file);
    bad_ca.client_ca_file = Some(garbage);
    assert_eq!(bad_ca.validate().unwrap_err().field, "tls.client_ca_file");
}

#[test]
fn changed_files_are_reloaded_and_broken_ones_keep_the_previous_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let first = self_signed("first.example");
    let (cert_file, key_file) = write_pair(dir.path(), &first);
    let metrics = ReloadMetrics::default();
    let resolver = ReloadingCertificate::load(
        &cert_file,
        &key_file,
        Duration::ZERO,
        crypto_provider(),
        "otlp",
        metrics.clone(),
    )
    .unwrap();
    let served = |resolver: &ReloadingCertificate| resolver.current().cert[0].to_vec();
    let initial = served(&resolver);

    let second = self_signed("second.example");
    write_pair(dir.path(), &second);
    let reloaded = served(&resolver);
    assert_ne!(reloaded, initial);
    let expected = load_certified_key(&cert_file, &key_file, &crypto_provider()).unwrap();
    assert_eq!(reloaded, expected.cert[0].to_vec());
    assert_eq!(metrics.loaded.get(), 1);

    std::fs::write(&cert_file, "garbage").unwrap();
    assert_eq!(
        served(&resolver),
        reloaded,
        "garbage keeps the previous certificate"
    );
    assert_eq!(metrics.failed.get(), 1);
}
