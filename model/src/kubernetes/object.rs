//! References to what records are about: an object, as sources name it, and the
//! operator a record belongs to.

use serde::{Deserialize, Serialize};

use super::kinds::plural_of_kind;
use super::name::Name;

/// An object as sources describe it. Any of `kind`/`resource` may be known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    pub group: Name,
    /// `RayJob`; empty when only the resource is known.
    pub kind: Name,
    /// `rayjobs`; empty when only the kind is known.
    pub resource: Name,
    pub namespace: Name,
    pub name: Name,
}

/// What identifies an object across sources: namespace, lowercase plural
/// resource, name. The group is left out because many sources do not give it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: Name,
    pub resource: Name,
    pub name: Name,
}

impl ObjectRef {
    pub fn key(&self) -> ObjectKey {
        let resource = if self.resource.is_empty() {
            plural_of_kind(&self.kind).into()
        } else {
            self.resource.to_ascii_lowercase()
        };
        ObjectKey {
            namespace: self.namespace.clone(),
            resource,
            name: self.name.clone(),
        }
    }

    /// Enough to identify an object: a name and a kind or resource.
    pub fn is_known(&self) -> bool {
        let named_kind = !self.kind.is_empty() || !self.resource.is_empty();
        !self.name.is_empty() && named_kind
    }

    /// Fills what this reference lacks from another reference to the same object.
    pub fn merge(&mut self, other: &ObjectRef) {
        for (mine, theirs) in [
            (&mut self.group, &other.group),
            (&mut self.kind, &other.kind),
            (&mut self.resource, &other.resource),
        ] {
            if mine.is_empty() && !theirs.is_empty() {
                mine.clone_from(theirs);
            }
        }
    }

    /// `Kind namespace/name` (or the resource when the kind is unknown).
    pub fn display(&self) -> String {
        let kind = if self.kind.is_empty() {
            &self.resource
        } else {
            &self.kind
        };
        if self.namespace.is_empty() {
            format!("{kind} {}", self.name)
        } else {
            format!("{kind} {}/{}", self.namespace, self.name)
        }
    }
}

/// The operator a record belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OperatorRef {
    pub name: Name,
    /// The operator's own namespace.
    pub namespace: Name,
}
