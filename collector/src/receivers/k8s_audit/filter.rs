//! Which audit events become records: by stage, by user and by resource, so that a
//! busy cluster's audit stream costs little beyond the operators' own requests. The
//! filter reads an event's header only (`EventHeader`, borrowed from its text).

use wildmatch::WildMatch;

use super::config::K8sAuditConfig;
use opscope_model::kubernetes::audit::EventHeader;

/// Patterns to take and patterns to leave out of what they take.
struct Globs {
    include: Vec<WildMatch>,
    exclude: Vec<WildMatch>,
}

impl Globs {
    fn new(include: &[String], exclude: &[String]) -> Self {
        let compile = |patterns: &[String]| patterns.iter().map(|p| WildMatch::new(p)).collect();
        Self {
            include: compile(include),
            exclude: compile(exclude),
        }
    }

    fn admits(&self, value: &str) -> bool {
        self.include.iter().any(|glob| glob.matches(value))
            && !self.exclude.iter().any(|glob| glob.matches(value))
    }
}

pub struct EventFilter {
    stages: Vec<String>,
    users: Globs,
    any_user_verbs: Vec<String>,
    resources: Globs,
}

impl EventFilter {
    pub fn new(config: &K8sAuditConfig) -> Self {
        Self {
            stages: config.stages.clone(),
            users: Globs::new(&config.users, &config.exclude_users),
            any_user_verbs: config.any_user_verbs.clone(),
            resources: Globs::new(&config.resources, &config.exclude_resources),
        }
    }

    pub fn admits(&self, header: &EventHeader<'_>) -> bool {
        let user_admitted = self.users.admits(&header.user.username)
            || self.any_user_verbs.iter().any(|verb| *verb == header.verb);
        self.stages.iter().any(|stage| *stage == header.stage)
            && user_admitted
            && self.resources.admits(&header.qualified_resource())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::kubernetes::audit::EventList;

    fn admitted(config: &K8sAuditConfig, items: &str) -> Vec<String> {
        let body =
            format!(r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{items}]}}"#);
        let list = EventList::parse(body.as_bytes(), 100).unwrap();
        let filter = EventFilter::new(config);
        list.events()
            .unwrap()
            .iter()
            .filter(|event| filter.admits(&event.header))
            .map(|event| event.header.audit_id.to_string())
            .collect()
    }

    const OPERATOR: &str = "system:serviceaccount:ray-system:kuberay-operator";
    const DONE: &str = "ResponseComplete";

    /// Events as `(audit id, stage, verb, user, resource or resource.group)`.
    fn items(events: &[(&str, &str, &str, &str, &str)]) -> String {
        let item = |&(id, stage, verb, user, resource): &(&str, &str, &str, &str, &str)| {
            let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
            format!(
                r#"{{"auditID":"{id}","stage":"{stage}","verb":"{verb}","user":{{"username":"{user}"}},"objectRef":{{"resource":"{resource}","apiGroup":"{group}"}}}}"#
            )
        };
        events.iter().map(item).collect::<Vec<_>>().join(",")
    }

    #[test]
    fn defaults_take_completed_requests_of_service_accounts_and_every_delete() {
        let items = items(&[
            ("job", DONE, "update", OPERATOR, "rayjobs.ray.io"),
            (
                "received",
                "RequestReceived",
                "update",
                OPERATOR,
                "rayjobs.ray.io",
            ),
            (
                "admin",
                DONE,
                "update",
                "kubernetes-admin",
                "rayjobs.ray.io",
            ),
            (
                "deleted",
                DONE,
                "delete",
                "kubernetes-admin",
                "rayjobs.ray.io",
            ),
            (
                "lease",
                DONE,
                "update",
                OPERATOR,
                "leases.coordination.k8s.io",
            ),
            ("event", DONE, "create", OPERATOR, "events"),
            ("pod", DONE, "create", OPERATOR, "pods"),
        ]);
        let config = K8sAuditConfig::default();
        assert_eq!(admitted(&config, &items), ["job", "deleted", "pod"]);
    }

    #[test]
    fn users_and_resources_by_glob() {
        let items = items(&[
            ("ray", DONE, "update", OPERATOR, "rayjobs.ray.io"),
            (
                "system",
                DONE,
                "update",
                "system:serviceaccount:kube-system:x",
                "pods",
            ),
            ("cluster", DONE, "update", OPERATOR, "rayclusters.ray.io"),
            (
                "admin",
                DONE,
                "update",
                "kubernetes-admin",
                "rayjobs.ray.io",
            ),
        ]);
        let config = K8sAuditConfig {
            users: vec!["*".into()],
            exclude_users: vec!["system:serviceaccount:kube-system:*".into()],
            resources: vec!["*.ray.io".into()],
            exclude_resources: vec!["rayclusters.*".into()],
            ..K8sAuditConfig::default()
        };
        assert_eq!(admitted(&config, &items), ["ray", "admin"]);
    }
}
