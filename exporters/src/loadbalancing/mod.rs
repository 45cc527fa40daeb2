//! Routing by object to a tier of gateways, so that each object's evidence meets in
//! one correlator however many nodes it came from: which gateway owns a key (`ring`),
//! how a batch is cut by owner (`routing`, decoded; `wire`, encoded), and the
//! exporter that sends each gateway its part (`exporter`).

mod config;
mod exporter;
pub mod resolver;
pub mod ring;
pub mod routing;
pub mod wire;

pub use config::{DnsResolverConfig, LoadBalancingConfig, ROUTING_BY_OBJECT};
pub use exporter::LoadBalancingExporter;
pub use ring::Ring;
