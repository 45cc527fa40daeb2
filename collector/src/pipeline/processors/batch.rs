//! The `batch` processor in a pipeline: each pipeline has one of its own, which
//! gathers what the pipeline carries into batches.

use opscope_model::config::FieldError;
use opscope_processors::Processor;
use opscope_processors::batch::{BatchConfig, BatchProcessor};

use super::SharedProcessors;
use crate::consumer::OtlpBatch;

/// The pipeline's own `batch` processor.
pub fn build<T: OtlpBatch>(
    _name: &str,
    config: &BatchConfig,
    _shared: &SharedProcessors,
) -> Result<Box<dyn Processor<T>>, FieldError> {
    Ok(Box::new(BatchProcessor::new(config.clone())))
}
