//! One round of the receiver: the kernel's counts per cgroup, each cgroup's owner,
//! and the metrics of those reported. Cgroups that are gone are handed back so that
//! their kernel slots are freed.

use std::collections::HashMap;

use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;

use super::counts::Counts;
use super::otlp_metrics::{CgroupReport, to_request};
use super::owners::{Owner, Owners, Skipped};

pub struct Rounds {
    owners: Owners,
    /// When each cgroup was first seen: the start of its cumulative series.
    first_seen: HashMap<u64, u64>,
}

pub struct Round {
    pub request: Option<ExportMetricsServiceRequest>,
    /// Cgroups no longer in the hierarchy.
    pub gone: Vec<u64>,
}

impl Rounds {
    pub fn new(owners: Owners) -> Self {
        Self {
            owners,
            first_seen: HashMap::new(),
        }
    }

    /// The round of `counts` read at `now` (nanoseconds since the epoch).
    pub fn round(&mut self, counts: Vec<(u64, Counts)>, now: u64) -> Round {
        self.owners.start_round();
        let mut gone = Vec::new();
        let mut reported: Vec<(Owner, Counts, u64)> = Vec::new();
        for (id, counts) in counts {
            match self.owners.owner(id) {
                Ok(owner) => {
                    let start = *self.first_seen.entry(id).or_insert(now);
                    reported.push((owner, counts, start));
                }
                Err(Skipped::UnknownCgroup) => gone.push(id),
                Err(_) => {}
            }
        }
        for id in &gone {
            self.first_seen.remove(id);
        }
        let reports: Vec<CgroupReport> = reported
            .iter()
            .map(|(owner, counts, start)| CgroupReport {
                owner,
                counts,
                start: *start,
            })
            .collect();
        Round {
            request: to_request(&reports, now),
            gone,
        }
    }
}
