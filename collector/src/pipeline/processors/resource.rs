//! The `resource` processor in a pipeline: each pipeline has one of its own, which
//! sets, inserts and deletes the resource attributes of what the pipeline carries.

use opscope_model::config::FieldError;
use opscope_processors::Processor;
use opscope_processors::resource::{ResourceConfig, ResourceProcessor};

use super::SharedProcessors;
use crate::consumer::OtlpBatch;

/// The pipeline's own `resource` processor `name`; its settings' errors name it.
pub fn build<T: OtlpBatch>(
    name: &str,
    config: &ResourceConfig,
    _shared: &SharedProcessors,
) -> Result<Box<dyn Processor<T>>, FieldError> {
    let processor =
        ResourceProcessor::new(config).map_err(|e| e.within(&format!("processors.{name}")))?;
    Ok(Box::new(processor))
}
