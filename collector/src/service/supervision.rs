//! Watching the agent's tasks while it runs. A receiver, a pipeline, a sending
//! queue's consumer, the signal output, a hand-over or one of the agent's own servers
//! that panics (or a receiver that ends by itself) leaves the agent answering for data
//! no task will carry; the first such end is found here, and the agent then stops
//! with an error that names the task.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::JoinError;

use super::assembly::Agent;

/// A task of the agent that ended while the agent ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{task} {ending}")]
pub struct TaskEnd {
    /// What the task was: `pipeline traces`, `receiver otlp`,
    /// `exporter otlp/jaeger of pipeline traces`.
    pub task: String,
    pub ending: Ending,
}

impl TaskEnd {
    pub(super) fn new(task: String, ending: Ending) -> Self {
        Self { task, ending }
    }
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ending {
    #[error("panicked: {0}")]
    Panicked(String),
    #[error("ended by itself")]
    Returned,
}

impl Ending {
    /// The end of a task that panicked (or was cancelled), with its panic's message.
    pub(super) fn panicked(error: JoinError) -> Self {
        match error.try_into_panic() {
            Ok(payload) => Self::Panicked(panic_message(payload.as_ref())),
            Err(error) => Self::Panicked(error.to_string()),
        }
    }
}

/// The message a panic was raised with, when it is text.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(no message)".to_string()
    }
}

impl Agent {
    /// Waits until a task of the agent ends unexpectedly; pending for as long as
    /// every one runs. Only while the agent runs: at shutdown tasks end by design.
    pub(super) async fn task_ended(&mut self) -> TaskEnd {
        std::future::poll_fn(|cx| self.poll_task_ended(cx)).await
    }

    fn poll_task_ended(&mut self, cx: &mut Context<'_>) -> Poll<TaskEnd> {
        if let Poll::Ready(end) = self.receiving.poll_ended(cx) {
            return Poll::Ready(end);
        }
        if let Poll::Ready(end) = self.draining.poll_panicked(cx) {
            return Poll::Ready(end);
        }
        if let Poll::Ready((task, error)) = self.signals.poll_panicked(cx) {
            return Poll::Ready(TaskEnd::new(task, Ending::panicked(error)));
        }
        if let Poll::Ready(end) = self.poll_handovers(cx) {
            return Poll::Ready(end);
        }
        while let Poll::Ready(Some(ended)) = self.servers.poll_join_next(cx) {
            if let Err(error) = ended
                && error.is_panic()
            {
                let task = "a memory watch or an endpoint of the agent's own".to_string();
                return Poll::Ready(TaskEnd::new(task, Ending::panicked(error)));
            }
        }
        Poll::Pending
    }

    /// Polls the hand-overs; one that ended is taken out of the list (it is not
    /// awaited again at shutdown).
    fn poll_handovers(&mut self, cx: &mut Context<'_>) -> Poll<TaskEnd> {
        let mut index = 0;
        while let Some(handover) = self.handovers.get_mut(index) {
            let Poll::Ready(ended) = Pin::new(handover).poll(cx) else {
                index += 1;
                continue;
            };
            self.handovers.swap_remove(index);
            if let Err(error) = ended
                && error.is_panic()
            {
                let task = "a correlator's hand-over".to_string();
                return Poll::Ready(TaskEnd::new(task, Ending::panicked(error)));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::oneshot;
    use tokio::task::JoinSet;

    use super::*;
    use crate::config::Config;
    use crate::listening::Listening;
    use crate::self_telemetry::SelfTelemetry;
    use crate::service::shutdown::{PipelineTask, Receiving};
    use crate::service::{RunOptions, ServiceError, assembly, serve};

    const OVERFLOW: &str = "overflow when adding duration to instant";

    const CONFIG: &str = r#"
receivers:
  otlp:
    protocols:
      grpc: { endpoint: 127.0.0.1:0 }
exporters:
  debug:
service:
  telemetry:
    metrics: { address: 127.0.0.1:0 }
  pipelines:
    traces: { receivers: [otlp], exporters: [debug] }
"#;

    #[tokio::test]
    async fn a_pipeline_that_panics_stops_the_agent_with_an_error_naming_it() {
        let config = Config::from_yaml(CONFIG, &|_| None).unwrap();
        let telemetry = Arc::new(SelfTelemetry::new());
        let listening = Listening::default();
        let mut agent = assembly::assemble(&config, &telemetry, &listening)
            .await
            .unwrap();
        let readiness = agent.readiness.clone();
        // A pipeline of the agent's that panics once the agent is ready, as one whose
        // batch timeout overflowed an instant did.
        let (panic_now, panics) = oneshot::channel::<()>();
        let broken: PipelineTask = Box::pin(async move {
            let _ = panics.await;
            panic!("{OVERFLOW}");
        });
        agent
            .draining
            .upstream
            .add("traces/broken", (broken, Vec::new()));
        let (ready, is_ready) = oneshot::channel();
        let options = RunOptions {
            listen_report: None,
            on_ready: Some(ready),
        };
        let serving = tokio::spawn(async move {
            let never = std::future::pending::<()>();
            serve(agent, &listening, options, never, Duration::from_secs(5)).await
        });
        is_ready.await.unwrap();
        assert!(readiness.is_ready());

        panic_now.send(()).unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(20), serving)
            .await
            .expect("the agent stops by itself")
            .unwrap();
        let Err(ServiceError::TaskEnded(end)) = ended else {
            panic!("the agent ended with {ended:?}");
        };
        assert_eq!(
            end,
            TaskEnd::new(
                "pipeline traces/broken".into(),
                Ending::Panicked(OVERFLOW.into())
            )
        );
        assert_eq!(
            ServiceError::TaskEnded(end).to_string(),
            format!("pipeline traces/broken panicked: {OVERFLOW}; opscope stopped")
        );
        assert!(!readiness.is_ready());
    }

    async fn next_end(receiving: &mut Receiving) -> TaskEnd {
        let ended = std::future::poll_fn(|cx| receiving.poll_ended(cx));
        tokio::time::timeout(Duration::from_secs(5), ended)
            .await
            .expect("a receiver ended")
    }

    #[tokio::test]
    async fn a_receiver_that_panics_or_ends_is_named_and_an_idle_one_is_not() {
        let mut receiving = Receiving::default();
        // The kernel probe where it cannot run: no task, nothing lost.
        receiving.add("ebpf", JoinSet::new());
        let mut tasks = JoinSet::new();
        tasks.spawn(std::future::pending::<()>());
        tasks.spawn(async { panic!("{OVERFLOW}") });
        receiving.add("filelog", tasks);
        assert_eq!(
            next_end(&mut receiving).await,
            TaskEnd::new("receiver filelog".into(), Ending::Panicked(OVERFLOW.into()))
        );
        let mut tasks = JoinSet::new();
        tasks.spawn(async {});
        receiving.add("otlp", tasks);
        assert_eq!(
            next_end(&mut receiving).await,
            TaskEnd::new("receiver otlp".into(), Ending::Returned)
        );
        let mut context = Context::from_waker(std::task::Waker::noop());
        assert!(receiving.poll_ended(&mut context).is_pending());
    }
}
