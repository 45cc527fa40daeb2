//! What `deploy/` and `config/` ship, one file per thing shipped: every config
//! validates with `opscope validate` (`configs`); the kustomize trees are well-formed
//! YAML of the expected kinds with the agent's promises (read-only pod logs, non-root,
//! probes...), copies kustomize needs inside its tree match their sources, and the
//! trees render as kustomize renders them and validate (`kustomize`); the ebpf
//! overlays add only what the kernel probe needs (`overlays`); the Helm chart lints and
//! renders what kustomize renders (`helm`); the Prometheus rules pass `promtool check
//! rules` and their unit tests (`rules`). `support` reads the files, runs `opscope
//! validate` and the scripts of deploy/kubernetes, and makes renders comparable.
//!
//! The kustomize trees are rendered by `deploy/kubernetes/render.py` (checked against
//! kustomize where it is installed) and validated against the Kubernetes OpenAPI
//! schemas by `deploy/kubernetes/validate.py`; no cluster is needed. Those tests skip
//! without PyYAML and kubernetes-validate unless `OPSCOPE_REQUIRE_BACKENDS=1`.

mod configs;
mod helm;
mod kustomize;
mod overlays;
mod rules;
mod support;
