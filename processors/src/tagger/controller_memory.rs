//! What the tagger remembers of each controller across records, so that a record
//! naming an object without its Kind takes the Kind the controller's reconcile lines
//! name, and of the deletions the logs tell of. Bounded: past [`MAX_CONTROLLERS`] new
//! controllers are not remembered.

use foldhash::{HashMap, HashMapExt};

/// Controllers remembered at most.
pub const MAX_CONTROLLERS: usize = 4096;

#[derive(Debug, Default, Clone)]
struct Remembered {
    kind: Option<Box<str>>,
}

/// Objects whose deletion the logs told of, remembered at most.
pub const MAX_DELETIONS: usize = 4096;

#[derive(Debug)]
pub struct ControllerMemory {
    controllers: HashMap<Box<str>, Remembered>,
    /// When the logs first said an object (`kind/namespace/name`) was being deleted.
    deletions: HashMap<Box<str>, u64>,
}

impl Default for ControllerMemory {
    fn default() -> Self {
        Self {
            controllers: HashMap::new(),
            deletions: HashMap::new(),
        }
    }
}

impl ControllerMemory {
    fn entry(&mut self, controller: &str) -> Option<&mut Remembered> {
        if !self.controllers.contains_key(controller) {
            if self.controllers.len() >= MAX_CONTROLLERS {
                return None;
            }
            self.controllers
                .insert(controller.into(), Remembered::default());
        }
        self.controllers.get_mut(controller)
    }

    /// The Kind a controller's records named last.
    pub fn kind_of(&self, controller: &str) -> Option<&str> {
        self.controllers.get(controller)?.kind.as_deref()
    }

    pub fn remember_kind(&mut self, controller: &str, kind: &str) {
        if let Some(entry) = self.entry(controller)
            && entry.kind.as_deref() != Some(kind)
        {
            entry.kind = Some(kind.into());
        }
    }

    /// The time the logs first said the object was being deleted: the deletion
    /// timestamp a log-only source has (a later record does not restart the clock).
    pub fn deletion_seen(&mut self, object: &str, time: u64) -> Option<u64> {
        if let Some(first) = self.deletions.get(object) {
            return Some(*first);
        }
        if self.deletions.len() >= MAX_DELETIONS {
            return None;
        }
        self.deletions.insert(object.into(), time);
        Some(time)
    }

    /// The object's finalizer was removed: its deletion is no longer pending.
    pub fn deletion_done(&mut self, object: &str) {
        self.deletions.remove(object);
    }
}

/// The last labels of API groups (`kf.dev`, `ray.io`).
const TOP_LEVEL_DOMAINS: &[&str] = &["dev", "io", "com", "sh", "org", "net", "cloud", "ai"];

/// The Kind, or the plural resource, a controller's name suggests: controller-runtime
/// names controllers after the lowercase Kind (`serverclass`), Knative after the
/// resource (`spaces.kf.dev`, `subscription-controller`), Crossplane
/// `managed/cloudsqlinstance`. `(kind, resource)`: one of the two.
pub fn guess_from_controller(controller: &str) -> Option<(Option<&str>, Option<&str>)> {
    // upjet's `managed/ec2.aws.upbound.io/v1beta1, kind=networkacl`.
    if let Some((_, kind)) = controller.rsplit_once("kind=") {
        let kind = kind.trim();
        return (kind.len() >= 2 && kind.bytes().all(|b| b.is_ascii_alphanumeric()))
            .then_some((Some(kind), None));
    }
    let last = controller.rsplit('/').next()?;
    let (head, qualified) = match last.rsplit_once('.') {
        // `spaces.kf.dev`: a resource and its API group.
        Some((_, top)) if TOP_LEVEL_DOMAINS.contains(&top) => {
            (last.split('.').next().unwrap_or(last), true)
        }
        // A Go package path (`github.com.tektoncd.pipeline.pkg.reconciler.pipelinerun
        // .Reconciler`): the last segment that is not `Reconciler`.
        Some(_) => (
            last.split('.')
                .rev()
                .find(|segment| {
                    !segment.eq_ignore_ascii_case("reconciler")
                        && !segment.eq_ignore_ascii_case("controller")
                })
                .unwrap_or(last),
            false,
        ),
        None => (last, false),
    };
    let bare = [
        "-controller",
        "_controller",
        "controller",
        "Controller",
        "-reconciler",
        "reconciler",
        "Reconciler",
    ]
    .iter()
    .find_map(|suffix| head.strip_suffix(suffix))
    .unwrap_or(head)
    .trim_end_matches(['-', '_']);
    // cert-manager's `certificates-trigger`: a plural resource, then what the
    // controller does of it.
    if let Some((first, _)) = bare.split_once('-')
        && first.len() >= 4
        && first.ends_with('s')
        && first.bytes().all(|b| b.is_ascii_lowercase())
    {
        return Some((None, Some(first)));
    }
    if bare.len() < 2 || !bare.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    // `spaces.kf.dev` is a resource; `serverclass` a lowercase Kind.
    if qualified {
        Some((None, Some(bare)))
    } else {
        Some((Some(bare), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_guessed_from_controller_names() {
        assert_eq!(
            guess_from_controller("serverclass"),
            Some((Some("serverclass"), None))
        );
        assert_eq!(
            guess_from_controller("spaces.kf.dev"),
            Some((None, Some("spaces")))
        );
        assert_eq!(
            guess_from_controller("subscription-controller"),
            Some((Some("subscription"), None))
        );
        assert_eq!(
            guess_from_controller("managed/cloudsqlinstance"),
            Some((Some("cloudsqlinstance"), None))
        );
        assert_eq!(
            guess_from_controller(
                "github.com.tektoncd.pipeline.pkg.reconciler.pipelinerun.Reconciler"
            ),
            Some((Some("pipelinerun"), None))
        );
        assert_eq!(
            guess_from_controller("managed/ec2.aws.upbound.io/v1beta1, kind=networkacl"),
            Some((Some("networkacl"), None))
        );
        assert_eq!(
            guess_from_controller("cert-manager/controller/certificates-trigger"),
            Some((None, Some("certificates")))
        );
        assert_eq!(guess_from_controller("kube-controller-manager"), None);
        assert_eq!(
            guess_from_controller("io.git.mic.ope.MicrocksReconciler"),
            Some((Some("Microcks"), None))
        );
        assert_eq!(guess_from_controller("x"), None);
        assert_eq!(guess_from_controller("a b"), None);
    }

    #[test]
    fn a_controller_keeps_the_kind_it_named_last() {
        let mut memory = ControllerMemory::default();
        assert_eq!(memory.kind_of("c"), None);
        memory.remember_kind("c", "Widget");
        assert_eq!(memory.kind_of("c"), Some("Widget"));
    }

    #[test]
    fn a_deletion_keeps_its_first_time_until_done() {
        let mut memory = ControllerMemory::default();
        assert_eq!(memory.deletion_seen("k/ns/a", 10), Some(10));
        assert_eq!(memory.deletion_seen("k/ns/a", 20), Some(10));
        memory.deletion_done("k/ns/a");
        assert_eq!(memory.deletion_seen("k/ns/a", 30), Some(30));
    }

    #[test]
    fn memory_is_bounded() {
        let mut memory = ControllerMemory::default();
        for index in 0..MAX_CONTROLLERS + 10 {
            memory.remember_kind(&format!("c{index}"), "K");
        }
        assert_eq!(memory.controllers.len(), MAX_CONTROLLERS);
    }
}
