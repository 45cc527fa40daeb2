//! The `operator_tagger` processor in a pipeline: one instance for every pipeline
//! that lists it, so that a reconcile seen in spans tags the logs of its trace.

use opscope_model::config::FieldError;
use opscope_processors::Processor;
use opscope_processors::tagger::TaggerConfig;

use super::SharedProcessors;
use crate::consumer::OtlpBatch;

/// The shared tagger `name` (made with the service, in [`SharedProcessors::new`]).
pub fn build<T: OtlpBatch>(
    name: &str,
    _config: &TaggerConfig,
    shared: &SharedProcessors,
) -> Result<Box<dyn Processor<T>>, FieldError> {
    Ok(Box::new(shared.instance(&shared.taggers, name)?))
}
