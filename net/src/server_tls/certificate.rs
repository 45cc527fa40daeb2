//! The server's certificate: read from PEM files, checked against its key, and
//! re-read when the files change so a renewed certificate needs no restart.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::TlsError;
use crate::file_watch::WatchedFiles;

const CERT_FIELD: &str = "tls.cert_file";
const KEY_FIELD: &str = "tls.key_file";

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        field,
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate of a PEM file, in order; at least one.
pub fn read_certificates(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(field, path)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            field,
            path: path.to_path_buf(),
            source,
        })?;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate {
            field,
            path: path.to_path_buf(),
        });
    }
    Ok(certificates)
}

/// A certificate chain and the key it certifies, as read from `cert_file` and `key_file`.
pub fn load_certified_key(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = read_certificates(CERT_FIELD, cert_file)?;
    let key_pem = read(KEY_FIELD, key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|source| TlsError::Pem {
        field: KEY_FIELD,
        path: key_file.to_path_buf(),
        source,
    })?;
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|source| TlsError::Key {
            path: key_file.to_path_buf(),
            source,
        })?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        // A key type whose public half cannot be derived is taken on trust.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(_) => Err(TlsError::KeyMismatch {
            key: key_file.to_path_buf(),
            cert: cert_file.to_path_buf(),
        }),
    }
}

/// Counts of certificate reloads, by outcome.
#[derive(Debug, Clone, Default)]
pub struct ReloadMetrics {
    pub loaded: Counter,
    pub failed: Counter,
}

/// Hands every handshake the current certificate, re-reading the files first when
/// they changed. The check runs on the handshake itself rather than on a timer:
/// it costs two `stat` calls at most once per `reload_interval`, needs no task to
/// own, and an idle server does no work. New files that do not load (half
/// written, mismatched key, garbage) are logged and counted, and the previous
/// certificate stays in use until the files change again.
pub struct ReloadingCertificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    receiver: String,
    metrics: ReloadMetrics,
    state: Mutex<ReloadState>,
}

struct ReloadState {
    current: Arc<CertifiedKey>,
    files: WatchedFiles,
}

impl ReloadingCertificate {
    /// Loads the certificate now; a failure here fails the start.
    pub fn load(
        cert_file: &Path,
        key_file: &Path,
        reload_interval: Duration,
        provider: Arc<CryptoProvider>,
        receiver: &str,
        metrics: ReloadMetrics,
    ) -> Result<Self, TlsError> {
        // Stamped before reading, so a write racing the first read is seen later.
        let files = WatchedFiles::new(
            vec![cert_file.to_path_buf(), key_file.to_path_buf()],
            reload_interval,
        );
        let current = Arc::new(load_certified_key(cert_file, key_file, &provider)?);
        Ok(Self {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            provider,
            receiver: receiver.to_string(),
            metrics,
            state: Mutex::new(ReloadState { current, files }),
        })
    }

    pub(super) fn current(&self) -> Arc<CertifiedKey> {
        // A panic elsewhere while holding the lock leaves consistent state behind.
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.files.changed() {
            match load_certified_key(&self.cert_file, &self.key_file, &self.provider) {
                Ok(reloaded) => {
                    state.current = Arc::new(reloaded);
                    self.metrics.loaded.inc();
                    tracing::info!(receiver = %self.receiver, cert_file = %self.cert_file.display(), "TLS certificate reloaded");
                }
                Err(err) => {
                    self.metrics.failed.inc();
                    tracing::warn!(receiver = %self.receiver, %err, "TLS certificate not reloaded; the previous one stays in use");
                }
            }
        }
        Arc::clone(&state.current)
    }
}

impl fmt::Debug for ReloadingCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCertificate")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}
