//! Every processor a pipeline runs, built in one place: those that are one instance
//! however many pipelines list them (made once, with the service), and those each
//! pipeline has its own of. How a pipeline gets each type's instance is the `build`
//! of that type's file, which the processor table (`config/components.rs`) names.

mod batch;
mod correlator;
mod memory_limiter;
mod operator_tagger;
mod resource;

use std::collections::BTreeMap;
use std::sync::Arc;

use opscope_model::config::FieldError;
use opscope_model::memory::MemoryAccount;
use opscope_processors::Processor;
use opscope_processors::correlator::SharedCorrelator;
use opscope_processors::correlator::processor::SignalSink;
use opscope_processors::memory_limiter::{MemoryLimiter, SystemMemory};
use opscope_processors::tagger::OperatorTagger;

use super::memory_watch;
use crate::config::components::processor_table;
use crate::config::{Config, ProcessorConfig};
use crate::consumer::OtlpBatch;

/// Processors that are one instance however many pipelines list them: the
/// correlator (evidence from traces, logs and metrics meets in one place) and the
/// tagger (a reconcile seen in spans tags the logs of its trace), and the memory
/// limiters (memory is the process's, whichever pipeline fills it).
pub struct SharedProcessors {
    pub correlators: BTreeMap<String, SharedCorrelator>,
    pub taggers: BTreeMap<String, OperatorTagger>,
    pub memory_limiters: BTreeMap<String, MemoryLimiter>,
    /// The data the process holds in memory, which every memory limiter reads.
    pub memory: MemoryAccount,
}

impl SharedProcessors {
    /// Builds the shared processors of `config`; correlators emit into `signals`.
    pub fn new(
        config: &Config,
        signals: &SignalSink,
        memory: MemoryAccount,
    ) -> Result<Self, FieldError> {
        let mut correlators = BTreeMap::new();
        for (id, processor) in &config.processors {
            if let ProcessorConfig::Correlator(settings) = processor {
                let correlator = SharedCorrelator::open((**settings).clone(), Arc::clone(signals))
                    .map_err(|error| {
                        FieldError::new(
                            format!("processors.{id}.storage"),
                            format!("the journal cannot be opened: {error}"),
                        )
                    })?;
                correlators.insert(id.clone(), correlator);
            }
        }
        let taggers = config
            .processors
            .iter()
            .filter_map(|(id, processor)| match processor {
                ProcessorConfig::OperatorTagger(tagger) => {
                    Some((id.clone(), OperatorTagger::new(tagger)))
                }
                _ => None,
            })
            .collect();
        let mut memory_limiters = BTreeMap::new();
        for (id, processor) in &config.processors {
            if let ProcessorConfig::MemoryLimiter(settings) = processor {
                let limiter =
                    memory_watch::build_limiter(id, settings, &SystemMemory::default(), &memory)?;
                memory_limiters.insert(id.clone(), limiter);
            }
        }
        Ok(Self {
            correlators,
            taggers,
            memory_limiters,
            memory,
        })
    }

    /// The shared instance `name` of one kind, for a pipeline that lists it.
    pub fn instance<P: Clone>(
        &self,
        instances: &BTreeMap<String, P>,
        name: &str,
    ) -> Result<P, FieldError> {
        instances
            .get(name)
            .cloned()
            .ok_or_else(|| FieldError::new(format!("processors.{name}"), "was not started"))
    }

    /// The memory limiter a pipeline lists, if any.
    pub fn memory_limiter_of(
        &self,
        processors: &[(&str, &ProcessorConfig)],
    ) -> Option<(&str, &MemoryLimiter)> {
        processors.iter().find_map(|(id, _)| {
            self.memory_limiters
                .get_key_value(*id)
                .map(|(id, limiter)| (id.as_str(), limiter))
        })
    }
}

/// Reads the processor table (`config/components.rs`) for the building: each row's
/// `build` names a function of this folder.
macro_rules! processor_builds {
    ($($type_name:literal => $variant:ident($config:ty) { build: $build:path $(,)? })+) => {
        /// The processor `name` of a pipeline of `T`: its own instance, or the shared one.
        pub(super) fn build_processor<T: OtlpBatch>(
            name: &str,
            config: &ProcessorConfig,
            shared: &SharedProcessors,
        ) -> Result<Box<dyn Processor<T>>, FieldError> {
            match config {
                $(ProcessorConfig::$variant(config) => $build(name, config, shared),)+
            }
        }
    };
}

processor_table!(processor_builds);
