//! A real Kubernetes control plane on loopback for the end-to-end scenarios: etcd and
//! kube-apiserver as `testkit/backends/build` builds them from their modules, serving
//! with a CA of the test's own, static tokens for the operators, AlwaysAllow, and the
//! audit webhook backend (writes at `RequestResponse`, batches of at most 1 s) posting
//! to an address the test gives, where opscope's `k8s_audit` receiver listens.

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::prelude::{BASE64_STANDARD, Engine as _};
use rcgen::KeyPair;
use serde_json::Value;

use crate::backend::{HeldPort, Launch, ServerProcess, TempDir, built_or_skip, temp_dir};
use crate::pki::{TestCa, Usage};

/// kube-apiserver takes longer than the other servers to be ready: it installs its
/// default objects (priority levels, RBAC roles) before `/readyz` answers.
const APISERVER_PATIENCE: Duration = Duration::from_secs(90);

/// Writes the audit policy logs with their bodies; reads are left out (a hot loop's
/// evidence is its writes, and every list and watch would only add load).
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    resources:
      - { group: coordination.k8s.io, resources: [leases] }
      - { group: "", resources: [events] }
  - level: RequestResponse
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
"#;

/// The user the test itself acts as (group `system:masters`).
const ADMIN_USER: &str = "e2e-admin";

/// The built `etcd` and `kube-apiserver`, or `None` (with the reason printed) when
/// the running test may skip.
pub fn control_plane_or_skip() -> Option<(PathBuf, PathBuf)> {
    let etcd = built_or_skip("etcd", "etcd")?;
    let apiserver = built_or_skip("kube-apiserver", "kube-apiserver")?;
    Some((etcd, apiserver))
}

/// etcd and kube-apiserver on loopback; both killed on drop.
pub struct ControlPlane {
    _etcd: Etcd,
    apiserver: Mutex<Option<Child>>,
    apiserver_command: Vec<String>,
    apiserver_binary: PathBuf,
    port: HeldPort,
    ca_pem: String,
    tokens: Vec<(String, String)>,
    dir: TempDir,
}

impl ControlPlane {
    /// Starts etcd, then kube-apiserver on loopback port `port` (held by the caller,
    /// who may have told others where it will be; it binds it with `SO_REUSEPORT`, and
    /// the port stays held for it while it is down) with a static token for each of
    /// `users` (and the test's own admin), its audit webhook posting to
    /// `http://{audit_webhook}/`, and waits until `/readyz` answers.
    pub async fn start(
        etcd: &Path,
        apiserver: &Path,
        port: HeldPort,
        audit_webhook: &str,
        users: &[String],
    ) -> Self {
        let etcd = start_etcd(etcd).await;
        let etcd_url = etcd.process.url("");
        let dir = temp_dir("kube-apiserver");
        let pki = write_pki(dir.path());
        let mut tokens = vec![(ADMIN_USER.to_string(), token_for(ADMIN_USER))];
        tokens.extend(users.iter().map(|user| (user.clone(), token_for(user))));
        let token_file = tokens
            .iter()
            .map(|(user, token)| {
                let groups = if user == ADMIN_USER {
                    "system:masters"
                } else {
                    "system:serviceaccounts"
                };
                format!("{token},{user},{user},\"{groups}\"\n")
            })
            .collect::<String>();
        write(dir.path(), "tokens.csv", &token_file);
        write(dir.path(), "audit-policy.yaml", AUDIT_POLICY);
        write(
            dir.path(),
            "audit-webhook.kubeconfig",
            &format!(
                "apiVersion: v1\nkind: Config\nclusters:\n  - name: opscope\n    cluster: {{ server: \"http://{audit_webhook}/\" }}\n\
                 contexts:\n  - name: opscope\n    context: {{ cluster: opscope, user: \"\" }}\ncurrent-context: opscope\nusers: []\n"
            ),
        );
        let path = |name: &str| dir.path().join(name).display().to_string();
        let apiserver_command = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={}", port.port()),
            // The port is held (not listening) by `port` as long as the control plane
            // lives: no other process takes it, even while the server is down.
            "--permit-port-sharing".into(),
            format!("--tls-cert-file={}", path("apiserver.crt")),
            format!("--tls-private-key-file={}", path("apiserver.key")),
            format!("--cert-dir={}", path("certs")),
            format!("--token-auth-file={}", path("tokens.csv")),
            "--authorization-mode=AlwaysAllow".into(),
            format!(
                "--service-account-key-file={}",
                path("service-accounts.pub")
            ),
            format!(
                "--service-account-signing-key-file={}",
                path("service-accounts.key")
            ),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--endpoint-reconciler-type=none".into(),
            format!("--audit-policy-file={}", path("audit-policy.yaml")),
            format!(
                "--audit-webhook-config-file={}",
                path("audit-webhook.kubeconfig")
            ),
            "--audit-webhook-batch-max-wait=1s".into(),
            "--profiling=false".into(),
        ];
        let control_plane = Self {
            _etcd: etcd,
            apiserver: Mutex::new(None),
            apiserver_command,
            apiserver_binary: apiserver.to_path_buf(),
            port,
            ca_pem: pki,
            tokens,
            dir,
        };
        control_plane.start_apiserver().await;
        control_plane
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.port.address())
    }

    /// `127.0.0.1:<port>`, for a proxy in front of it.
    pub fn address(&self) -> String {
        self.port.address()
    }

    /// The CA that signed the API server's certificate, as PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Writes a kubeconfig for `user` (one of those given at start) into the control
    /// plane's directory and returns its path.
    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        let token = self.token(user);
        let ca = BASE64_STANDARD.encode(self.ca_pem.as_bytes());
        let file = format!("{}.kubeconfig", user.replace(':', "_"));
        write(
            self.dir.path(),
            &file,
            &format!(
                "apiVersion: v1\nkind: Config\nclusters:\n  - name: e2e\n    cluster:\n      server: {url}\n      certificate-authority-data: {ca}\n\
                 users:\n  - name: user\n    user:\n      token: {token}\ncontexts:\n  - name: e2e\n    context: {{ cluster: e2e, user: user }}\n\
                 current-context: e2e\n",
                url = self.url()
            ),
        );
        self.dir.path().join(file)
    }

    /// A client acting as the test's admin.
    pub fn admin(&self) -> ApiClient {
        ApiClient::new(&self.url(), &self.ca_pem, &self.token(ADMIN_USER))
    }

    fn token(&self, user: &str) -> String {
        self.tokens
            .iter()
            .find(|(known, _)| known == user)
            .map(|(_, token)| token.clone())
            .unwrap_or_else(|| panic!("{user} was not given a token at start"))
    }

    /// Kills kube-apiserver (etcd keeps running), as a control-plane outage does.
    pub fn kill_apiserver(&self) {
        let running = self
            .apiserver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut child) = running {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether kube-apiserver has exited since it was started.
    fn apiserver_exited(&self) -> Option<std::process::ExitStatus> {
        let mut running = self.apiserver.lock().ok()?;
        running.as_mut()?.try_wait().ok().flatten()
    }

    /// Starts kube-apiserver (again) on the same port, and waits until it is ready.
    pub async fn start_apiserver(&self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join("kube-apiserver.log"))
            .expect("the kube-apiserver log");
        let child = Command::new(&self.apiserver_binary)
            .args(&self.apiserver_command)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a second log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("kube-apiserver does not start: {error}"));
        // A poisoned lock only means a test panicked while holding it.
        *self
            .apiserver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(child);
        let admin = self.admin();
        let deadline = Instant::now() + APISERVER_PATIENCE;
        loop {
            if let Some(status) = self.apiserver_exited() {
                panic!("kube-apiserver exited ({status}):\n{}", self.log_tail());
            }
            if admin.get_text("/readyz").await.is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready within {APISERVER_PATIENCE:?}:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The last 30 lines kube-apiserver logged.
    pub fn log_tail(&self) -> String {
        let log =
            fs::read_to_string(self.dir.path().join("kube-apiserver.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- kube-apiserver log (tail) ---\n{tail}")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.kill_apiserver();
    }
}

/// etcd alone, on client and peer ports held for it for as long as it runs (it binds
/// them with `SO_REUSEPORT`). It would take port 0, but it advertises its client URL
/// and its JSON gateway dials the one it was given, so it is given real ones.
struct Etcd {
    process: ServerProcess,
    _ports: [HeldPort; 2],
}

async fn start_etcd(binary: &Path) -> Etcd {
    let [client, peer] = [(); 2].map(|()| HeldPort::shareable());
    let dir = temp_dir("etcd");
    let mut command = Command::new(binary);
    command.args([
        "--name=e2e".to_string(),
        format!("--data-dir={}", dir.path().join("data").display()),
        format!("--listen-client-urls=http://{}", client.address()),
        format!("--advertise-client-urls=http://{}", client.address()),
        format!("--listen-peer-urls=http://{}", peer.address()),
        format!("--initial-advertise-peer-urls=http://{}", peer.address()),
        format!("--initial-cluster=e2e=http://{}", peer.address()),
        "--socket-reuse-port".into(),
        // The data is thrown away after the test: durability would only cost time.
        "--unsafe-no-fsync".into(),
        "--log-level=warn".into(),
    ]);
    let launch = Launch {
        command,
        base_url: format!("http://{}", client.address()),
        ready: "/health".into(),
    };
    Etcd {
        process: ServerProcess::start("etcd", launch, dir).await,
        _ports: [client, peer],
    }
}

/// Writes the serving certificate (signed by a CA of its own) and the service-account
/// signing key into `dir`; returns the CA's PEM.
fn write_pki(dir: &Path) -> String {
    let ca = TestCa::new("e2e kubernetes CA");
    let serving = ca.issue("kube-apiserver", 1, Usage::ServerAuth);
    write(dir, "apiserver.crt", &serving.cert_pem);
    write(dir, "apiserver.key", &serving.key_pem);
    let signing = KeyPair::generate().expect("service-account key");
    write(dir, "service-accounts.key", &signing.serialize_pem());
    write(dir, "service-accounts.pub", &signing.public_key_pem());
    ca.pem()
}

fn write(dir: &Path, name: &str, content: &str) {
    let mut file = File::create(dir.join(name)).expect("a control-plane file");
    file.write_all(content.as_bytes())
        .expect("write a control-plane file");
}

/// A token no other user shares; static tokens are read once at start.
fn token_for(user: &str) -> String {
    use std::hash::{BuildHasher, RandomState};
    format!("{:016x}", RandomState::new().hash_one(user))
}

/// The API server's REST interface as one user sees it: JSON in and out.
#[derive(Clone)]
pub struct ApiClient {
    base: String,
    http: reqwest::Client,
    token: String,
}

/// An answer other than 2xx: its status and body.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub body: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status, self.body)
    }
}

impl ApiClient {
    pub fn new(base: &str, ca_pem: &str, token: &str) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("the CA as PEM");
        let http = reqwest::Client::builder()
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(10))
            .build()
            .expect("an HTTPS client");
        Self {
            base: base.to_string(),
            http,
            token: token.to_string(),
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, &Value)>,
    ) -> Result<String, ApiError> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some((content_type, body)) = body {
            request = request
                .header("Content-Type", content_type)
                .body(body.to_string());
        }
        let answer = request.send().await.map_err(|error| ApiError {
            status: 0,
            body: error.to_string(),
        })?;
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap_or_default();
        if (200..300).contains(&status) {
            Ok(text)
        } else {
            Err(ApiError { status, body: text })
        }
    }

    /// `GET path`, the body as text (`/metrics`, `/readyz`).
    pub async fn get_text(&self, path: &str) -> Result<String, ApiError> {
        self.send(reqwest::Method::GET, path, None).await
    }

    pub async fn get(&self, path: &str) -> Result<Value, ApiError> {
        self.send_json(reqwest::Method::GET, path, None).await
    }

    /// `POST collection` of `object`.
    pub async fn create(&self, collection: &str, object: &Value) -> Result<Value, ApiError> {
        let body = Some(("application/json", object));
        self.send_json(reqwest::Method::POST, collection, body)
            .await
    }

    /// A JSON merge patch of the object at `path`.
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> Result<Value, ApiError> {
        let body = Some(("application/merge-patch+json", patch));
        self.send_json(reqwest::Method::PATCH, path, body).await
    }

    /// [`Self::send`], the answer read as JSON (`null` when it is none).
    async fn send_json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, &Value)>,
    ) -> Result<Value, ApiError> {
        let text = self.send(method, path, body).await?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn delete(&self, path: &str) -> Result<(), ApiError> {
        self.send(reqwest::Method::DELETE, path, None)
            .await
            .map(drop)
    }

    /// Creates the CustomResourceDefinition `crd` and waits until it is established.
    pub async fn apply_crd(&self, crd: &Value) {
        const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        match self.create(CRDS, crd).await {
            Ok(_) => {}
            Err(error) if error.status == 409 => {}
            Err(error) => panic!("the CRD is refused: {error}"),
        }
        let name = crd["metadata"]["name"].as_str().expect("the CRD's name");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let established = self
                .get(&format!("{CRDS}/{name}"))
                .await
                .ok()
                .and_then(|crd| {
                    crd["status"]["conditions"].as_array().map(|conditions| {
                        conditions
                            .iter()
                            .any(|c| c["type"] == "Established" && c["status"] == "True")
                    })
                })
                .unwrap_or(false);
            if established {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "CRD {name} not established in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Creates the namespace `name` (an existing one is fine).
    pub async fn create_namespace(&self, name: &str) {
        let namespace = serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name }
        });
        match self.create("/api/v1/namespaces", &namespace).await {
            Ok(_) => {}
            Err(error) if error.status == 409 => {}
            Err(error) => panic!("namespace {name} is refused: {error}"),
        }
    }
}

/// The sum of the samples of `family` in a text exposition whose labels include all
/// of `wanted` (`apiserver_request_total` of one resource and subresource, say).
pub fn sum_samples(exposition: &str, family: &str, wanted: &[(&str, &str)]) -> f64 {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            (name == family
                && wanted
                    .iter()
                    .all(|(key, value)| labels.contains(&format!("{key}=\"{value}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use base64::prelude::{BASE64_STANDARD, Engine as _};
    use serde_json::{Value, json};

    use super::start_etcd;
    use crate::backend::{ServerProcess, built_or_skip, http_client};

    /// etcd on the client port held for it: a key put there is read back.
    #[tokio::test]
    async fn etcd_serves_on_the_port_held_for_it() {
        let Some(binary) = built_or_skip("etcd", "etcd") else {
            return;
        };
        let etcd = start_etcd(&binary).await;
        let (key, value) = (BASE64_STANDARD.encode("k"), BASE64_STANDARD.encode("v"));
        post(
            &etcd.process,
            "/v3/kv/put",
            json!({ "key": key, "value": value }),
        )
        .await;
        let range = post(&etcd.process, "/v3/kv/range", json!({ "key": key })).await;
        assert_eq!(range["kvs"][0]["value"], value, "{range}");
    }

    /// A POST of `body` to etcd's JSON gateway; its answer, which must be 2xx.
    async fn post(etcd: &ServerProcess, path: &str, body: Value) -> Value {
        let answer = http_client()
            .post(etcd.url(path))
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap_or_else(|error| panic!("{path}: {error}\n{}", etcd.log_tail()));
        let status = answer.status();
        let text = answer.text().await.unwrap_or_default();
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).expect("etcd answers JSON")
    }
}
