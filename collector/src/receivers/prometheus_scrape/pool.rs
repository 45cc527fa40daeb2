//! The targets of one receiver and their scrape loops: the listed targets and those
//! of the targets file, with loops started and stopped as the file changes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::config::PrometheusScrapeConfig;
use super::scraper::{self, ScrapeSettings};
use super::targets::{Target, TargetsFile};

/// The longest a change of the targets file goes unseen.
const TARGETS_FILE_POLL: Duration = Duration::from_secs(5);
/// Targets scraped at most by one receiver; beyond, the rest are left out and logged.
const MAX_TARGETS: usize = 1_000;

/// Where the targets come from: the config's list and the targets file.
pub struct TargetSources {
    listed: Vec<Target>,
    file: Option<TargetsFile>,
    from_file: Vec<Target>,
}

impl TargetSources {
    pub fn new(config: &PrometheusScrapeConfig) -> Self {
        Self {
            listed: config.targets.iter().map(|a| Target::new(a)).collect(),
            file: config.targets_file.as_deref().map(TargetsFile::new),
            from_file: Vec::new(),
        }
    }

    fn all(&self) -> Vec<Target> {
        self.listed.iter().chain(&self.from_file).cloned().collect()
    }

    /// All targets, when the file changed since the last call; a file that cannot
    /// be taken leaves the targets as they were.
    fn changed(&mut self, receiver: &str) -> Option<Vec<Target>> {
        let file = self.file.as_mut()?;
        match file.changed_targets()? {
            Ok(targets) => self.from_file = targets,
            Err(error) => {
                tracing::warn!(receiver, file = %file.path().display(), %error,
                    "targets file not taken; the targets stay as they were");
                return None;
            }
        }
        Some(self.all())
    }
}

/// Runs the scrape loops until `shutdown` fires, then waits for them to end.
pub async fn run(
    mut sources: TargetSources,
    settings: Arc<ScrapeSettings>,
    shutdown: CancellationToken,
) {
    let poll = settings.interval.min(TARGETS_FILE_POLL);
    let mut pool = ScrapePool::new(settings);
    pool.set(sources.all());
    loop {
        if let Some(targets) = sources.changed(pool.settings.receiver()) {
            pool.set(targets);
        }
        let wait = tokio::time::sleep(poll);
        if shutdown.run_until_cancelled(wait).await.is_none() {
            break;
        }
    }
    pool.stop().await;
}

struct ScrapePool {
    settings: Arc<ScrapeSettings>,
    running: HashMap<Target, CancellationToken>,
    loops: JoinSet<()>,
}

impl ScrapePool {
    fn new(settings: Arc<ScrapeSettings>) -> Self {
        Self {
            settings,
            running: HashMap::new(),
            loops: JoinSet::new(),
        }
    }

    /// Scrapes exactly `wanted`: loops of targets no longer wanted stop, new ones start.
    fn set(&mut self, wanted: Vec<Target>) {
        let mut wanted: BTreeSet<Target> = wanted.into_iter().collect();
        if wanted.len() > MAX_TARGETS {
            tracing::warn!(receiver = %self.settings.receiver(), targets = wanted.len(),
                "more targets than {MAX_TARGETS}; the rest are not scraped");
            wanted = wanted.into_iter().take(MAX_TARGETS).collect();
        }
        self.running.retain(|target, stop| {
            let keep = wanted.contains(target);
            if !keep {
                stop.cancel();
            }
            keep
        });
        for target in wanted {
            if !self.running.contains_key(&target) {
                let stop = CancellationToken::new();
                let scrape = scraper::run(target.clone(), self.settings.clone(), stop.clone());
                self.loops.spawn(scrape);
                self.running.insert(target, stop);
            }
        }
        while self.loops.try_join_next().is_some() {}
    }

    async fn stop(mut self) {
        for stop in self.running.values() {
            stop.cancel();
        }
        while self.loops.join_next().await.is_some() {}
    }
}
