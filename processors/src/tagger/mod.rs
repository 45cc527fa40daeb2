//! The `operator_tagger` processor: recognises which operator, reconcile and object
//! each record belongs to, from the shapes real operators emit, and writes it as
//! attributes.
