//! Checking a request's `Authorization` against the configured credentials, in
//! constant time, with credential files re-read when they change.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use opscope_model::config::FieldError;
use subtle::{Choice, ConstantTimeEq};

use super::{AuthConfig, read_password, read_tokens};
use opscope_net::file_watch::WatchedFiles;

/// Credential files are looked at no more often than this: a rotated token is
/// taken within a second, and a busy receiver does not `stat` on every request.
const FILE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

pub struct Authenticator {
    bearer_tokens: Option<Credential<Vec<Vec<u8>>>>,
    basic: Option<BasicCredentials>,
}

struct BasicCredentials {
    username: Vec<u8>,
    password: Credential<Vec<u8>>,
}

/// A credential written in the config, or read from a file and re-read when the
/// file changes; a file that no longer reads keeps the previous value in use.
enum Credential<T> {
    Fixed(Arc<T>),
    File(Mutex<CredentialFile<T>>),
}

struct CredentialFile<T> {
    path: PathBuf,
    files: WatchedFiles,
    value: Arc<T>,
    read: fn(&Path) -> Result<T, String>,
    receiver: String,
}

impl<T> Credential<T> {
    fn from_file(
        path: &Path,
        read: fn(&Path) -> Result<T, String>,
        receiver: &str,
    ) -> Result<Self, String> {
        let files = WatchedFiles::new(vec![path.to_path_buf()], FILE_CHECK_INTERVAL);
        let value = Arc::new(read(path)?);
        Ok(Self::File(Mutex::new(CredentialFile {
            path: path.to_path_buf(),
            files,
            value,
            read,
            receiver: receiver.to_string(),
        })))
    }

    fn current(&self) -> Arc<T> {
        match self {
            Self::Fixed(value) => Arc::clone(value),
            Self::File(file) => {
                // The state stays consistent even if a holder panicked.
                let mut file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if file.files.changed() {
                    match (file.read)(&file.path) {
                        Ok(value) => {
                            file.value = Arc::new(value);
                            tracing::info!(receiver = %file.receiver, file = %file.path.display(), "credentials reloaded");
                        }
                        Err(err) => {
                            tracing::warn!(receiver = %file.receiver, %err, "credentials not reloaded; the previous ones stay in use");
                        }
                    }
                }
                Arc::clone(&file.value)
            }
        }
    }
}

impl Authenticator {
    /// Reads the configured credentials; errors name the setting at fault.
    pub fn new(config: &AuthConfig, receiver: &str) -> Result<Self, FieldError> {
        let bearer_tokens = match &config.bearer_token_file {
            Some(path) => Some(
                Credential::from_file(path, read_tokens, receiver)
                    .map_err(|m| FieldError::new("auth.bearer_token_file", m))?,
            ),
            None if config.bearer_tokens.is_empty() => None,
            None => Some(Credential::Fixed(Arc::new(
                config
                    .bearer_tokens
                    .iter()
                    .map(|token| token.as_bytes().to_vec())
                    .collect(),
            ))),
        };
        let basic = match &config.basic {
            None => None,
            Some(basic) => {
                let password = match (&basic.password, &basic.password_file) {
                    (_, Some(path)) => Credential::from_file(path, read_password, receiver)
                        .map_err(|m| FieldError::new("auth.basic.password_file", m))?,
                    (Some(password), None) => {
                        Credential::Fixed(Arc::new(password.as_bytes().to_vec()))
                    }
                    (None, None) => {
                        return Err(FieldError::new("auth.basic.password", "is required"));
                    }
                };
                Some(BasicCredentials {
                    username: basic.username.as_bytes().to_vec(),
                    password,
                })
            }
        };
        Ok(Self {
            bearer_tokens,
            basic,
        })
    }

    /// Whether an `Authorization` value carries valid credentials.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some((scheme, credentials)) = authorization.and_then(split_scheme) else {
            return false;
        };
        if scheme.eq_ignore_ascii_case(b"bearer") {
            return self
                .bearer_tokens
                .as_ref()
                .is_some_and(|tokens| any_equal(&tokens.current(), credentials));
        }
        if scheme.eq_ignore_ascii_case(b"basic") {
            return self
                .basic
                .as_ref()
                .is_some_and(|basic| basic.admits(credentials));
        }
        false
    }

    /// The `WWW-Authenticate` challenges of a refusal, one per scheme accepted.
    pub fn challenges(&self) -> impl Iterator<Item = &'static str> {
        let bearer = self
            .bearer_tokens
            .as_ref()
            .map(|_| "Bearer realm=\"opscope\"");
        let basic = self
            .basic
            .as_ref()
            .map(|_| "Basic realm=\"opscope\", charset=\"UTF-8\"");
        bearer.into_iter().chain(basic)
    }
}

impl BasicCredentials {
    fn admits(&self, encoded: &[u8]) -> bool {
        let Ok(decoded) = BASE64.decode(encoded) else {
            return false;
        };
        let Some((username, password)) = split_at_byte(&decoded, b':') else {
            return false;
        };
        let password_matches = self.password.current().as_slice().ct_eq(password);
        // Both halves are compared whatever the first gives, so timing tells
        // nothing about which one was wrong.
        bool::from(self.username.as_slice().ct_eq(username) & password_matches)
    }
}

/// `Scheme credentials`, split at the first space, credentials trimmed.
fn split_scheme(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let (scheme, credentials) = split_at_byte(value, b' ')?;
    Some((scheme, credentials.trim_ascii()))
}

/// The bytes before and after the first `separator`.
fn split_at_byte(bytes: &[u8], separator: u8) -> Option<(&[u8], &[u8])> {
    let mut parts = bytes.splitn(2, |&byte| byte == separator);
    Some((parts.next()?, parts.next()?))
}

/// Compares against every candidate without stopping at a match, each comparison
/// in constant time, so the response time does not reveal how much of a token
/// an attacker guessed right (only, at most, its length).
fn any_equal(candidates: &[Vec<u8>], given: &[u8]) -> bool {
    let matched = candidates
        .iter()
        .fold(Choice::from(0), |matched, candidate| {
            matched | candidate.as_slice().ct_eq(given)
        });
    bool::from(matched)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator(json: &str) -> Authenticator {
        let config: AuthConfig = serde_json::from_str(json).unwrap();
        Authenticator::new(&config, "test").unwrap()
    }

    fn basic(user_password: &str) -> Vec<u8> {
        format!("Basic {}", BASE64.encode(user_password)).into_bytes()
    }

    #[test]
    fn bearer_tokens_are_matched_exactly() {
        let auth = authenticator(r#"{"bearer_tokens":["alpha","beta"]}"#);
        assert!(auth.admits(Some(b"Bearer beta")));
        assert!(auth.admits(Some(b"bearer alpha")));
        assert!(!auth.admits(Some(b"Bearer alph")));
        assert!(!auth.admits(Some(b"Bearer alphaa")));
        assert!(!auth.admits(Some(b"Bearer")));
        assert!(!auth.admits(None));
        assert!(!auth.admits(Some(&basic("alpha:alpha"))));
    }

    #[test]
    fn basic_credentials_need_both_halves() {
        let auth = authenticator(r#"{"basic":{"username":"agent","password":"p:w"}}"#);
        assert!(auth.admits(Some(&basic("agent:p:w"))));
        assert!(!auth.admits(Some(&basic("agent:p"))));
        assert!(!auth.admits(Some(&basic("other:p:w"))));
        assert!(!auth.admits(Some(b"Basic !!notbase64")));
        assert!(!auth.admits(Some(b"Bearer p:w")));
        assert_eq!(auth.challenges().count(), 1);
    }

    #[test]
    fn a_token_file_is_re_read_when_it_changes_and_kept_when_it_breaks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "first\n").unwrap();
        let config = AuthConfig {
            bearer_token_file: Some(path.clone()),
            ..AuthConfig::default()
        };
        let auth = Authenticator::new(&config, "test").unwrap();
        assert!(auth.admits(Some(b"Bearer first")));
        std::fs::write(&path, "second\nthird\n").unwrap();
        std::thread::sleep(FILE_CHECK_INTERVAL + Duration::from_millis(50));
        assert!(auth.admits(Some(b"Bearer third")));
        assert!(!auth.admits(Some(b"Bearer first")));
        std::fs::write(&path, "\n").unwrap();
        std::thread::sleep(FILE_CHECK_INTERVAL + Duration::from_millis(50));
        assert!(
            auth.admits(Some(b"Bearer second")),
            "an empty file keeps the old tokens"
        );
    }
}
