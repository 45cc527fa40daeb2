//! Which gateways there are: a fixed list, or the addresses a DNS name resolves to
//! (a headless Service's A records), resolved again every `interval`. A resolution
//! that fails or times out keeps the last list, and is said once a minute while it
//! keeps failing.

use std::future::Future;
use std::io;
use std::time::Duration;

use opscope_model::repeated_warning::RepeatedWarning;

/// Where the gateways' addresses come from.
pub trait Resolve: Send + Sync + 'static {
    /// The gateways' `host:port` addresses now.
    fn resolve(&self) -> impl Future<Output = io::Result<Vec<String>>> + Send;
}

/// The addresses of `hostname`, each with `port`.
pub struct DnsResolver {
    pub hostname: String,
    pub port: u16,
}

impl Resolve for DnsResolver {
    async fn resolve(&self) -> io::Result<Vec<String>> {
        let addresses = tokio::net::lookup_host((self.hostname.as_str(), self.port)).await?;
        let mut endpoints: Vec<String> = addresses.map(|address| address.to_string()).collect();
        endpoints.sort_unstable();
        endpoints.dedup();
        Ok(endpoints)
    }
}

/// Resolves with `resolver` now and then every `interval`, handing each new list to
/// `changed`, until `stop`. Each resolution may take `timeout`; a failed one keeps
/// the last list and is logged: the first failure, then once a minute with how many
/// failed since, and the first success after.
pub async fn follow<R: Resolve>(
    resolver: R,
    interval: Duration,
    timeout: Duration,
    stop: tokio_util::sync::CancellationToken,
    mut changed: impl FnMut(Vec<String>) + Send,
) {
    let mut last: Option<Vec<String>> = None;
    let mut failing = RepeatedWarning::default();
    let mut failures: u64 = 0;
    loop {
        match resolve_once(&resolver, timeout).await {
            Ok(endpoints) => {
                if failures > 0 {
                    tracing::info!(failures, "loadbalancing: the gateways resolve again");
                    failures = 0;
                    failing.cleared();
                }
                if last.as_ref() != Some(&endpoints) {
                    tracing::info!(gateways = ?endpoints, "loadbalancing: gateways resolved");
                    last = Some(endpoints.clone());
                    changed(endpoints);
                }
            }
            Err(failure) => {
                failures += 1;
                if let Some(not_logged) = failing.occurred_now() {
                    tracing::warn!(
                        not_logged,
                        "loadbalancing: resolving the gateways {failure}; keeping the last list"
                    );
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// One resolution within `timeout`: the gateways, or what went wrong.
async fn resolve_once<R: Resolve>(resolver: &R, timeout: Duration) -> Result<Vec<String>, String> {
    match tokio::time::timeout(timeout, resolver.resolve()).await {
        Ok(Ok(endpoints)) if endpoints.is_empty() => Err("found no gateway".into()),
        Ok(Ok(endpoints)) => Ok(endpoints),
        Ok(Err(error)) => Err(format!("failed: {error}")),
        Err(_) => Err(format!("timed out after {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A resolver that answers from a script, one answer per call, the last again.
    struct Scripted(Mutex<Vec<io::Result<Vec<String>>>>);

    impl Resolve for Scripted {
        async fn resolve(&self) -> io::Result<Vec<String>> {
            let mut answers = self.0.lock().expect("script");
            if answers.len() > 1 {
                answers.remove(0)
            } else {
                match answers.first() {
                    Some(Ok(endpoints)) => Ok(endpoints.clone()),
                    _ => Err(io::Error::other("no answer")),
                }
            }
        }
    }

    #[tokio::test]
    async fn changes_are_handed_on_and_failures_keep_the_last_list() {
        let a = || "10.0.0.5:4317".to_string();
        let b = || "10.0.0.6:4317".to_string();
        let script = Scripted(Mutex::new(vec![
            Ok(vec![a()]),
            Ok(vec![a()]),
            Err(io::Error::other("SERVFAIL")),
            Ok(vec![]),
            Ok(vec![a(), b()]),
        ]));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let record = Arc::clone(&seen);
        let task = tokio::spawn(follow(
            script,
            Duration::from_millis(10),
            Duration::from_secs(1),
            stop.clone(),
            move |endpoints| record.lock().expect("seen").push(endpoints),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.cancel();
        task.await.expect("the follower ends");
        assert_eq!(*seen.lock().expect("seen"), vec![vec![a()], vec![a(), b()]]);
    }

    #[tokio::test]
    async fn a_name_resolves_to_its_addresses_with_the_port() {
        let resolver = DnsResolver {
            hostname: "127.0.0.1".into(),
            port: 4317,
        };
        assert_eq!(
            resolver.resolve().await.expect("resolves"),
            vec!["127.0.0.1:4317".to_string()]
        );
    }
}
