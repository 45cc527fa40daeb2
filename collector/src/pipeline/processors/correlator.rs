//! The `correlator` processor in a pipeline: one instance for every pipeline that
//! lists it, where the evidence of traces, logs and metrics meets.

use opscope_model::config::FieldError;
use opscope_processors::Processor;
use opscope_processors::correlator::CorrelatorConfig;

use super::SharedProcessors;
use crate::consumer::OtlpBatch;

/// The shared correlator `name` (opened with the service, in
/// [`SharedProcessors::new`]).
pub fn build<T: OtlpBatch>(
    name: &str,
    _config: &CorrelatorConfig,
    shared: &SharedProcessors,
) -> Result<Box<dyn Processor<T>>, FieldError> {
    Ok(Box::new(shared.instance(&shared.correlators, name)?))
}
