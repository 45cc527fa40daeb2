//! The `memory_limiter` processor in a pipeline: one instance for every pipeline
//! that lists it, since the memory it limits is the process's, whichever pipeline
//! fills it.

use opscope_model::config::FieldError;
use opscope_processors::Processor;
use opscope_processors::memory_limiter::MemoryLimiterConfig;

use super::SharedProcessors;
use crate::consumer::OtlpBatch;

/// The shared memory limiter `name` (made with the service, in
/// [`SharedProcessors::new`]).
pub fn build<T: OtlpBatch>(
    name: &str,
    _config: &MemoryLimiterConfig,
    shared: &SharedProcessors,
) -> Result<Box<dyn Processor<T>>, FieldError> {
    Ok(Box::new(shared.instance(&shared.memory_limiters, name)?))
}
