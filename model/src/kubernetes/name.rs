//! The string type of Kubernetes names: an object's, its kind's and resource's, its
//! namespace's, an operator's, a pod's.

/// Most names are short, and up to 24 bytes are kept inline: a name costs no
/// allocation to parse out of a request path, to copy out of a record into every
/// event, or to keep per tracked object.
pub type Name = compact_str::CompactString;
