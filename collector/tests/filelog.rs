//! End to end, the `filelog` receiver in-process over real files: a writer thread that
//! rotates (rename, copytruncate), restarts on the checkpoint, a full pipeline.

use opscope_model::config::Validate;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use opscope::consumer::{Input, PipelineInput};
use opscope::extensions::health_check::Readiness;
use opscope::receivers::filelog::{self, FilelogConfig};
use opscope::receivers::{Consumers, ReceiverContext};
use opscope::self_telemetry::SelfTelemetry;
use opscope_model::memory::MemoryAccount;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::{KeyValue, any_value};
use opscope_proto::otlp::logs::v1::LogRecord;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

const POD_DIRECTORY: &str =
    "ray-system_kuberay-operator-6bc4f7d9c8-x2k4p_0f9d8c7b-1111-2222-3333-444455556666";
const TIME: &str = "2024-05-01T12:00:00.123456789Z";
const WAIT: Duration = Duration::from_secs(30);

/// The log directory of one container, laid out as the kubelet does, in a temp dir.
struct PodLogs {
    root: tempfile::TempDir,
    directory: PathBuf,
}

impl PodLogs {
    fn new() -> Self {
        let root = tempfile::tempdir().expect("a temp dir");
        let directory = root.path().join("pods").join(POD_DIRECTORY).join("manager");
        std::fs::create_dir_all(&directory).expect("mkdir");
        Self { root, directory }
    }

    fn log(&self, restart: u32) -> PathBuf {
        self.directory.join(format!("{restart}.log"))
    }

    fn storage(&self) -> PathBuf {
        self.root.path().join("state")
    }

    fn config(&self, settings: serde_json::Value) -> FilelogConfig {
        let mut config = json!({
            "include": [format!("{}/pods/*/*/*.log", self.root.path().display())],
            "start_at": "beginning",
            "poll_interval": "50ms",
        });
        if let (Some(base), Some(extra)) = (config.as_object_mut(), settings.as_object()) {
            base.extend(extra.clone());
        }
        let config: FilelogConfig = serde_json::from_value(config).expect("a filelog config");
        config.validate().expect("a valid config");
        config
    }
}

/// Requests the pipeline took, in order, gathered by a task that drains it.
#[derive(Clone, Default)]
struct Received {
    requests: Arc<Mutex<Vec<ExportLogsServiceRequest>>>,
    records: Arc<AtomicUsize>,
}

impl Received {
    fn drain(
        &self,
        mut pipeline: mpsc::Receiver<Input<ExportLogsServiceRequest>>,
    ) -> tokio::task::JoinHandle<()> {
        let received = self.clone();
        tokio::spawn(async move {
            while let Some(Input { data: request, .. }) = pipeline.recv().await {
                received.push(request);
            }
        })
    }

    fn push(&self, request: ExportLogsServiceRequest) {
        let count = records(&request).len();
        self.requests.lock().expect("not poisoned").push(request);
        self.records.fetch_add(count, Ordering::SeqCst);
    }

    fn count(&self) -> usize {
        self.records.load(Ordering::SeqCst)
    }

    fn bodies(&self) -> Vec<String> {
        let requests = self.requests.lock().expect("not poisoned");
        requests.iter().flat_map(records).map(body).collect()
    }
}

/// One running receiver.
struct Running {
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
}

impl Running {
    async fn start(
        config: &FilelogConfig,
        pipeline: &mpsc::Sender<Input<ExportLogsServiceRequest>>,
        telemetry: &Arc<SelfTelemetry>,
    ) -> Self {
        Self::start_acknowledged(config, pipeline, telemetry, false).await
    }

    /// Starts the receiver feeding a pipeline that acknowledges durably or not.
    async fn start_acknowledged(
        config: &FilelogConfig,
        pipeline: &mpsc::Sender<Input<ExportLogsServiceRequest>>,
        telemetry: &Arc<SelfTelemetry>,
        durable: bool,
    ) -> Self {
        let mut consumers = Consumers::default();
        consumers.logs.add_input(PipelineInput {
            sender: pipeline.clone(),
            acknowledges_durably: durable,
            limiter: None,
            account: MemoryAccount::default(),
        });
        let shutdown = CancellationToken::new();
        let context = ReceiverContext {
            id: "filelog".into(),
            consumers,
            telemetry: Arc::clone(telemetry),
            shutdown: shutdown.clone(),
            readiness: Readiness::default(),
            listening: Default::default(),
        };
        let mut tasks = JoinSet::new();
        filelog::start(config, context, &mut tasks)
            .await
            .expect("the receiver starts");
        Self { shutdown, tasks }
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        let stopped = tokio::time::timeout(Duration::from_secs(10), async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        assert!(stopped.is_ok(), "the receiver stops within 10 s");
    }
}

fn records(request: &ExportLogsServiceRequest) -> Vec<LogRecord> {
    request
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .flat_map(|s| s.log_records.clone())
        .collect()
}

fn body(record: LogRecord) -> String {
    match record.body.and_then(|b| b.value) {
        Some(any_value::Value::StringValue(text)) => text,
        other => panic!("a string body, not {other:?}"),
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    match value {
        any_value::Value::StringValue(text) => Some(text.clone()),
        any_value::Value::BoolValue(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// What a test looks at in a record.
#[derive(Debug, PartialEq, Eq)]
struct SeenRecord {
    body: String,
    stream: Option<String>,
    source: Option<String>,
    split: Option<String>,
}

impl SeenRecord {
    fn of(record: &LogRecord) -> Self {
        Self {
            body: body(record.clone()),
            stream: attribute(&record.attributes, "log.iostream"),
            source: attribute(&record.attributes, "opscope.log.source"),
            split: attribute(&record.attributes, "opscope.log.split"),
        }
    }
}

/// The value of the self-telemetry sample whose line starts with `series`.
fn sample(telemetry: &SelfTelemetry, series: &str) -> u64 {
    telemetry
        .render()
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

async fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !condition() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// The record of line `n`; lengths vary, and every tenth is written in two pieces.
fn line(n: usize) -> String {
    format!("line {n:06} {}", "x".repeat(n % 50))
}

fn write_line(file: &mut File, n: usize) -> std::io::Result<()> {
    let text = line(n);
    if n.is_multiple_of(10) {
        let (first, second) = text.split_at(7);
        write!(file, "{TIME} stdout P {first}\n{TIME} stdout F {second}\n")
    } else {
        writeln!(file, "{TIME} stdout F {text}")
    }
}

fn write_lines(path: &Path, lines: std::ops::Range<usize>) {
    let mut file = append(path);
    for n in lines {
        write_line(&mut file, n).expect("write");
    }
}

#[derive(Clone, Copy)]
enum Rotation {
    /// kubelet and containerd: `0.log` → `0.log.<n>`, a new `0.log`.
    Rename,
    /// logrotate: `0.log` copied to `0.log.<n>`, then emptied in place.
    CopyTruncate,
}

/// Writes `total` lines to `path`, rotating it every `every` lines; a rotation waits
/// until the receiver delivered a line of the current file (logrotate and the kubelet
/// do not rotate twice within one poll either). Rotated files older than two rotations
/// are deleted when `delete_old`.
struct Writer {
    path: PathBuf,
    total: usize,
    every: usize,
    rotation: Rotation,
    delete_old: bool,
}

impl Writer {
    fn spawn(self, delivered: Received) -> thread::JoinHandle<()> {
        thread::spawn(move || self.write(&delivered))
    }

    fn write(&self, delivered: &Received) {
        let mut file = append(&self.path);
        let mut rotations = 0;
        for n in 0..self.total {
            if n > 0 && n.is_multiple_of(self.every) {
                let current_started = n - self.every;
                let deadline = Instant::now() + WAIT;
                while delivered.count() <= current_started {
                    assert!(
                        Instant::now() < deadline,
                        "line {current_started} was never delivered"
                    );
                    thread::sleep(Duration::from_millis(5));
                }
                rotations += 1;
                file = self.rotate(rotations);
            }
            write_line(&mut file, n).expect("write");
            if n.is_multiple_of(200) {
                thread::sleep(Duration::from_millis(5));
            }
        }
    }

    fn rotate(&self, number: usize) -> File {
        let rotated = rotated_name(&self.path, number);
        match self.rotation {
            Rotation::Rename => std::fs::rename(&self.path, &rotated).expect("rename"),
            Rotation::CopyTruncate => {
                std::fs::copy(&self.path, &rotated).expect("copy");
                OpenOptions::new()
                    .write(true)
                    .open(&self.path)
                    .and_then(|f| f.set_len(0))
                    .expect("truncate");
            }
        }
        if self.delete_old && number > 2 {
            std::fs::remove_file(rotated_name(&self.path, number - 2)).expect("delete");
        }
        append(&self.path)
    }
}

fn rotated_name(path: &Path, number: usize) -> PathBuf {
    PathBuf::from(format!("{}.2024050112{number:04}", path.display()))
}

fn append(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open for appending")
}

fn assert_every_line_once_in_order(bodies: &[String], total: usize) {
    let mismatch = (0..total.max(bodies.len())).find(|&n| bodies.get(n) != Some(&line(n)));
    if let Some(n) = mismatch {
        panic!(
            "{} records for {total} lines; first difference at {n}: {:?} where {:?} was written",
            bodies.len(),
            bodies.get(n),
            (n < total).then(|| line(n)),
        );
    }
}

async fn tail_while_rotating(rotation: Rotation) {
    let logs = PodLogs::new();
    let telemetry = Arc::new(SelfTelemetry::new());
    let (pipeline, input) = mpsc::channel(16);
    let received = Received::default();
    let draining = received.drain(input);
    let config = logs.config(json!({"max_batch": 500}));
    let receiver = Running::start(&config, &pipeline, &telemetry).await;
    let total = 20_000;
    let writer = Writer {
        path: logs.log(0),
        total,
        every: 3_000,
        rotation,
        delete_old: true,
    }
    .spawn(received.clone());
    let delivered = wait_until(WAIT, || received.count() >= total).await;
    writer.join().expect("the writer finished");
    tokio::time::sleep(Duration::from_millis(300)).await;
    receiver.stop().await;
    drop(pipeline);
    draining.await.expect("drained");
    assert!(delivered, "{} of {total} lines delivered", received.count());
    assert_every_line_once_in_order(&received.bodies(), total);
    let accepted =
        "opscope_receiver_accepted_log_records_total{receiver=\"filelog\",transport=\"filelog\"}";
    assert_eq!(sample(&telemetry, accepted), total as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_rename_while_writing_delivers_every_line_once() {
    tail_while_rotating(Rotation::Rename).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copytruncate_while_writing_delivers_every_line_once() {
    tail_while_rotating(Rotation::CopyTruncate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_in_the_middle_lose_and_repeat_nothing() {
    let logs = PodLogs::new();
    let telemetry = Arc::new(SelfTelemetry::new());
    let (pipeline, input) = mpsc::channel(16);
    let received = Received::default();
    let draining = received.drain(input);
    let config = logs.config(json!({"storage": logs.storage(), "max_batch": 300}));
    let total = 15_000;
    let writer = Writer {
        path: logs.log(0),
        total,
        every: 2_000,
        rotation: Rotation::Rename,
        delete_old: false,
    }
    .spawn(received.clone());
    for stop_after in [total / 4, total / 2, total * 3 / 4] {
        let receiver = Running::start(&config, &pipeline, &telemetry).await;
        let reached = wait_until(WAIT, || received.count() >= stop_after).await;
        receiver.stop().await;
        assert!(
            reached,
            "{} of {stop_after} lines delivered",
            received.count()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let receiver = Running::start(&config, &pipeline, &telemetry).await;
    let delivered = wait_until(WAIT, || received.count() >= total).await;
    writer.join().expect("the writer finished");
    let checkpoint = logs.storage().join("filelog.checkpoint.json");
    let rotated_let_go = wait_until(WAIT, || {
        let text = std::fs::read_to_string(&checkpoint).unwrap_or_default();
        text.matches("\"path\"").count() == 1
    })
    .await;
    receiver.stop().await;
    drop(pipeline);
    draining.await.expect("drained");
    assert!(delivered, "{} of {total} lines delivered", received.count());
    assert_every_line_once_in_order(&received.bodies(), total);
    assert!(
        rotated_let_go,
        "rotated files leave the checkpoint once read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_rotated_while_the_receiver_was_down_is_finished_before_the_new_one() {
    let logs = PodLogs::new();
    let path = logs.log(0);
    write_lines(&path, 0..1_000);
    let telemetry = Arc::new(SelfTelemetry::new());
    let config = logs.config(json!({"storage": logs.storage(), "max_batch": 100}));
    // A pipeline that takes one request and is then full: the receiver stops mid-file.
    let (pipeline, mut input) = mpsc::channel(1);
    let receiver = Running::start(&config, &pipeline, &telemetry).await;
    assert!(wait_until(WAIT, || input.len() == 1).await, "a first batch");
    receiver.stop().await;
    let received = Received::default();
    received.push(input.recv().await.expect("the first batch").data);

    write_lines(&path, 1_000..1_500);
    std::fs::rename(&path, rotated_name(&path, 1)).expect("rename");
    write_lines(&path, 1_500..2_000);

    let (pipeline, input) = mpsc::channel(16);
    let draining = received.drain(input);
    let receiver = Running::start(&config, &pipeline, &telemetry).await;
    let delivered = wait_until(WAIT, || received.count() >= 2_000).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    receiver.stop().await;
    drop(pipeline);
    draining.await.expect("drained");
    assert!(delivered, "{} of 2000 lines delivered", received.count());
    assert_every_line_once_in_order(&received.bodies(), 2_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pipeline_pauses_reading_and_nothing_is_lost() {
    let logs = PodLogs::new();
    let total = 5_000;
    write_lines(&logs.log(0), 0..total);
    let telemetry = Arc::new(SelfTelemetry::new());
    let (pipeline, mut input) = mpsc::channel(1);
    let config = logs.config(json!({"max_batch": 100}));
    let receiver = Running::start(&config, &pipeline, &telemetry).await;
    let refused = "opscope_receiver_refused_requests_total{receiver=\"filelog\",transport=\"filelog\",signal=\"logs\",reason=\"pipeline_full\"}";
    assert!(
        wait_until(WAIT, || sample(&telemetry, refused) >= 3).await,
        "the receiver retries a full pipeline"
    );
    assert_eq!(input.len(), 1, "one request waits in the full pipeline");
    let accepted =
        "opscope_receiver_accepted_log_records_total{receiver=\"filelog\",transport=\"filelog\"}";
    assert_eq!(
        sample(&telemetry, accepted),
        100,
        "reading paused after the first batch"
    );

    let received = Received::default();
    received.push(input.recv().await.expect("a request").data);
    let draining = received.drain(input);
    let delivered = wait_until(WAIT, || received.count() >= total).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    receiver.stop().await;
    drop(pipeline);
    draining.await.expect("drained");
    assert!(delivered, "{} of {total} lines delivered", received.count());
    assert_every_line_once_in_order(&received.bodies(), total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_carry_pod_stream_source_and_split_marks_and_bad_lines_are_counted() {
    let logs = PodLogs::new();
    let path = logs.log(3);
    let long = "0123456789".repeat(300);
    let content = [
        r#"2024-05-01T12:00:00.5Z stdout F {"level":"info","msg":"first"}"#.to_string(),
        "not a container line".into(),
        "2024-05-01T14:00:00.000000123+02:00 stderr P part one,".into(),
        "2024-05-01T12:00:01Z stdout F second".into(),
        "2024-05-01T14:00:00.000000456+02:00 stderr F  part two".into(),
        r#"{"log":"from docker\n","stream":"stdout","time":"2024-05-01T12:00:02Z"}"#.into(),
        "2024-05-01T12:00:03Z stdout X unknown tag".into(),
        format!("2024-05-01T12:00:04Z stdout F {long}"),
    ];
    std::fs::write(&path, content.join("\n") + "\n").expect("write");
    let telemetry = Arc::new(SelfTelemetry::new());
    let (pipeline, input) = mpsc::channel(16);
    let received = Received::default();
    let draining = received.drain(input);
    let config = logs.config(json!({"max_log_size": 1024}));
    let receiver = Running::start(&config, &pipeline, &telemetry).await;
    let delivered = wait_until(WAIT, || received.count() >= 7).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    receiver.stop().await;
    drop(pipeline);
    draining.await.expect("drained");
    assert!(delivered, "{} records", received.count());

    let requests = received.requests.lock().expect("not poisoned").clone();
    let resource = requests[0].resource_logs[0]
        .resource
        .clone()
        .expect("a resource");
    for (key, value) in [
        ("k8s.namespace.name", "ray-system"),
        ("k8s.pod.name", "kuberay-operator-6bc4f7d9c8-x2k4p"),
        ("k8s.pod.uid", "0f9d8c7b-1111-2222-3333-444455556666"),
        ("k8s.container.name", "manager"),
        ("k8s.container.restart_count", "3"),
    ] {
        assert_eq!(
            attribute(&resource.attributes, key).as_deref(),
            Some(value),
            "{key}"
        );
    }
    let records: Vec<LogRecord> = requests.iter().flat_map(records).collect();
    let source = |line: u64| format!("{}:{line}", path.display());
    let seen: Vec<SeenRecord> = records.iter().map(SeenRecord::of).collect();
    let expected = |text: &str, stream: &str, line: u64, split: bool| SeenRecord {
        body: text.to_string(),
        stream: Some(stream.to_string()),
        source: Some(source(line)),
        split: split.then(|| "true".to_string()),
    };
    assert_eq!(
        seen,
        [
            expected(r#"{"level":"info","msg":"first"}"#, "stdout", 1, false),
            expected("second", "stdout", 4, false),
            expected("part one, part two", "stderr", 3, false),
            expected("from docker", "stdout", 6, false),
            expected(&long[..1024], "stdout", 8, true),
            expected(&long[1024..2048], "stdout", 8, true),
            expected(&long[2048..], "stdout", 8, true),
        ]
    );
    assert_eq!(
        records[2].time_unix_nano, 1_714_564_800_000_000_123,
        "CRI-O's offset is applied"
    );
    assert_eq!(records[0].time_unix_nano, 1_714_564_800_500_000_000);
    assert!(records.iter().all(|r| {
        attribute(&r.attributes, "log.file.path") == Some(path.display().to_string())
    }));
    let bad = "opscope_receiver_refused_log_records_total{receiver=\"filelog\",transport=\"filelog\",reason=\"bad_line\"}";
    assert_eq!(sample(&telemetry, bad), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_at_end_skips_what_files_held_and_more_files_than_handles_are_all_read() {
    let logs = PodLogs::new();
    let paths: Vec<PathBuf> = (0..4).map(|restart| logs.log(restart)).collect();
    for path in &paths {
        let mut file = append(path);
        for n in 0..10 {
            writeln!(file, "{TIME} stdout F old {n}").expect("write");
        }
    }
    let telemetry = Arc::new(SelfTelemetry::new());
    let (pipeline, input) = mpsc::channel(16);
    let received = Received::default();
    let draining = received.drain(input);
    let config = logs.config(json!({"start_at": "end", "max_open_files": 1}));
    let receiver = Running::start(&config, &pipeline, &telemetry).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (index, path) in paths.iter().enumerate() {
        writeln!(append(path), "{TIME} stdout F new {index}").expect("write");
    }
    let delivered = wait_until(WAIT, || received.count() >= paths.len()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    receiver.stop().await;
    drop(pipeline);
    draining.await.expect("drained");
    assert!(delivered, "{} records", received.count());
    let mut bodies = received.bodies();
    bodies.sort();
    assert_eq!(bodies, ["new 0", "new 1", "new 2", "new 3"]);
}

#[tokio::test]
async fn a_damaged_checkpoint_fails_the_start_with_its_path() {
    let logs = PodLogs::new();
    std::fs::create_dir_all(logs.storage()).expect("mkdir");
    std::fs::write(logs.storage().join("filelog.checkpoint.json"), "{").expect("write");
    let config = logs.config(json!({"storage": logs.storage()}));
    let context = ReceiverContext {
        id: "filelog".into(),
        consumers: Consumers::default(),
        telemetry: Arc::new(SelfTelemetry::new()),
        shutdown: CancellationToken::new(),
        readiness: Readiness::default(),
        listening: Default::default(),
    };
    let Err(err) = filelog::start(&config, context, &mut JoinSet::new()).await else {
        panic!("a damaged checkpoint must fail the start");
    };
    let message = err.to_string();
    assert!(
        message.starts_with("receivers.filelog.storage: "),
        "{message}"
    );
    assert!(message.contains("filelog.checkpoint.json"), "{message}");
}

/// The offsets of the checkpoint, by path; empty when there is none.
fn checkpointed_offsets(logs: &PodLogs) -> Vec<u64> {
    let text =
        std::fs::read_to_string(logs.storage().join("filelog.checkpoint.json")).unwrap_or_default();
    let Ok(checkpoint) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    checkpoint["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|file| file["position"]["offset"].as_u64())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_durable_pipeline_the_checkpoint_waits_for_its_confirmation() {
    let logs = PodLogs::new();
    let path = logs.log(0);
    write_lines(&path, 0..500);
    let size = std::fs::metadata(&path).expect("the log").len();
    let telemetry = Arc::new(SelfTelemetry::new());
    let config = logs.config(json!({"storage": logs.storage(), "max_batch": 100}));
    let (pipeline, mut input) = mpsc::channel::<Input<ExportLogsServiceRequest>>(16);
    let receiver = Running::start_acknowledged(&config, &pipeline, &telemetry, true).await;

    // The pipeline takes every batch but confirms none yet.
    let mut held = Vec::new();
    let mut taken = 0;
    while taken < 500 {
        let Ok(Some(Input {
            data, acknowledge, ..
        })) = tokio::time::timeout(WAIT, input.recv()).await
        else {
            panic!("only {taken} of 500 lines taken");
        };
        taken += records(&data).len();
        held.extend(acknowledge);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        checkpointed_offsets(&logs)
            .iter()
            .all(|offset| *offset == 0),
        "nothing is checkpointed before it is confirmed: {:?}",
        checkpointed_offsets(&logs)
    );

    for acknowledge in held {
        acknowledge.send(()).expect("the receiver waits");
    }
    let caught_up = wait_until(WAIT, || checkpointed_offsets(&logs) == [size]).await;
    assert!(caught_up, "{:?} of {size}", checkpointed_offsets(&logs));
    receiver.stop().await;
}
