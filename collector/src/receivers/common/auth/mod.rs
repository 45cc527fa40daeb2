//! Authentication of requests to a receiver: the `auth` settings (bearer tokens,
//! basic credentials, either inline or in files re-read on change), the check of a
//! request's `Authorization`, and the guards that refuse HTTP and gRPC requests
//! without valid credentials before any of their data is read.

mod credentials;
mod guard;

use std::fmt;
use std::path::{Path, PathBuf};

use opscope_model::config::{FieldError, Validate};
use serde::Deserialize;

pub use credentials::Authenticator;
pub use guard::{GrpcGuard, HttpGuard};

/// `auth:` of a receiver's server settings. A request passes with any one of the
/// credentials configured.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Tokens accepted as `Authorization: Bearer <token>`.
    pub bearer_tokens: Vec<Secret>,
    /// A file of tokens, one per line, re-read when it changes.
    pub bearer_token_file: Option<PathBuf>,
    /// `Authorization: Basic` credentials.
    pub basic: Option<BasicAuthConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicAuthConfig {
    pub username: String,
    #[serde(default)]
    pub password: Option<Secret>,
    /// A file holding the password (surrounding whitespace ignored), re-read when
    /// it changes.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
}

/// A credential from the config; never printed.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

impl Validate for AuthConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if self.bearer_tokens.is_empty() && self.bearer_token_file.is_none() && self.basic.is_none()
        {
            return Err(FieldError::new(
                "auth",
                "name bearer_tokens, bearer_token_file or basic",
            ));
        }
        if !self.bearer_tokens.is_empty() && self.bearer_token_file.is_some() {
            return Err(FieldError::new(
                "auth.bearer_token_file",
                "set bearer_tokens or bearer_token_file, not both",
            ));
        }
        for (index, token) in self.bearer_tokens.iter().enumerate() {
            if token.0.trim().is_empty() {
                return Err(FieldError::new(
                    format!("auth.bearer_tokens[{index}]"),
                    "is empty",
                ));
            }
        }
        if let Some(path) = &self.bearer_token_file {
            read_tokens(path).map_err(|m| FieldError::new("auth.bearer_token_file", m))?;
        }
        if let Some(basic) = &self.basic {
            basic.validate()?;
        }
        Ok(())
    }
}

impl BasicAuthConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if self.username.is_empty() || self.username.contains(':') {
            return Err(FieldError::new(
                "auth.basic.username",
                "must be non-empty and without ':'",
            ));
        }
        match (&self.password, &self.password_file) {
            (Some(_), Some(_)) => Err(FieldError::new(
                "auth.basic.password_file",
                "set password or password_file, not both",
            )),
            (None, None) => Err(FieldError::new(
                "auth.basic.password",
                "is required (or password_file)",
            )),
            (Some(password), None) if password.0.is_empty() => {
                Err(FieldError::new("auth.basic.password", "is empty"))
            }
            (Some(_), None) => Ok(()),
            (None, Some(path)) => read_password(path)
                .map(drop)
                .map_err(|m| FieldError::new("auth.basic.password_file", m)),
        }
    }
}

/// The tokens of a token file: its non-blank lines, trimmed; at least one.
fn read_tokens(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let text = read_text(path)?;
    let tokens: Vec<Vec<u8>> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| line.as_bytes().to_vec())
        .collect();
    if tokens.is_empty() {
        return Err(format!("{} holds no token", path.display()));
    }
    Ok(tokens)
}

/// The password of a password file, without surrounding whitespace (editors and
/// `echo` add a newline); not empty.
fn read_password(path: &Path) -> Result<Vec<u8>, String> {
    let text = read_text(path)?;
    let password = text.trim();
    if password.is_empty() {
        return Err(format!("{} holds no password", path.display()));
    }
    Ok(password.as_bytes().to_vec())
}

fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(json: &str) -> FieldError {
        let config: AuthConfig = serde_json::from_str(json).unwrap();
        config.validate().unwrap_err()
    }

    #[test]
    fn problems_name_their_field() {
        assert_eq!(problem("{}").field, "auth");
        assert_eq!(
            problem(r#"{"bearer_tokens":["a",""]}"#).field,
            "auth.bearer_tokens[1]"
        );
        assert_eq!(
            problem(r#"{"bearer_tokens":["a"],"bearer_token_file":"/x"}"#).field,
            "auth.bearer_token_file"
        );
        let missing = problem(r#"{"bearer_token_file":"/nonexistent/tokens"}"#);
        assert_eq!(missing.field, "auth.bearer_token_file");
        assert!(
            missing
                .message
                .starts_with("cannot read /nonexistent/tokens")
        );
        assert_eq!(
            problem(r#"{"basic":{"username":"u"}}"#).field,
            "auth.basic.password"
        );
        assert_eq!(
            problem(r#"{"basic":{"username":"a:b","password":"p"}}"#).field,
            "auth.basic.username"
        );
        assert!(serde_json::from_str::<AuthConfig>(r#"{"token":"x"}"#).is_err());
    }

    #[test]
    fn secrets_are_not_printed() {
        let config: AuthConfig = serde_json::from_str(
            r#"{"bearer_tokens":["s3cret"],"basic":{"username":"u","password":"pw"}}"#,
        )
        .unwrap();
        let printed = format!("{config:?}");
        assert!(
            !printed.contains("s3cret") && !printed.contains("\"pw\""),
            "{printed}"
        );
    }

    #[test]
    fn token_files_hold_one_token_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "one\n\n  two  \n").unwrap();
        assert_eq!(
            read_tokens(&path).unwrap(),
            [b"one".to_vec(), b"two".to_vec()]
        );
        std::fs::write(&path, "\n").unwrap();
        assert!(read_tokens(&path).unwrap_err().contains("holds no token"));
    }
}
