//! The `ebpf` receiver's kernel probe on this machine's kernel, as root: a workload
//! process, placed in a pod-shaped cgroup (cgroup v2 and, where the host has it, v1's
//! memory controller), connects 500 times to a loopback port configured as the API
//! server, half of them while nothing listens, has 20 more reset by the server, sends
//! a known number of bytes, forks 200 times and writes into a full 1 MiB tmpfs. The agent's metrics for that pod,
//! received by an OTLP sink, must match what the workload did.
//!
//! Its own harness: the test binary is also the workload (`OPSCOPE_EBPF_WORKLOAD`), a
//! single-threaded process whose every fork and send is its own. Skipped, with the
//! reason, when not root, without BTF or built without the `ebpf` feature; required
//! under `OPSCOPE_REQUIRE_BACKENDS=1` when root.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use common::{Opscope, OtlpSink, Ports, free_port, own_loopback_block};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{ResourceMetrics, metric::Data, number_data_point};
use opscope_testkit::pod_cgroup::{CgroupLayout, PodCgroup, is_root, kernel_probe_unavailable};

/// A generated pod: its UID and container id are made up for the test.
const POD_UID: &str = "5e1f0c2a-7b3d-4c8e-9f10-112233445566";
const CONTAINER_ID: &str = "4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b";
const NAMESPACE: &str = "probe-system";
const POD: &str = "probe-workload-7c9d5";

const CONNECTIONS: usize = 250;
/// Connections the server resets once they are established.
const RESETS: usize = 20;
const SENDS: usize = 100;
const SEND_SIZE: usize = 1000;
const FORKS: usize = 200;
const WORKLOAD: &str = "OPSCOPE_EBPF_WORKLOAD";

fn main() -> ExitCode {
    if let Ok(plan) = std::env::var(WORKLOAD) {
        return workload(&plan);
    }
    let Some(layouts) = layouts_or_skip() else {
        return ExitCode::SUCCESS;
    };
    mount_tracefs();
    for layout in &layouts {
        let started = std::time::Instant::now();
        counts_match_the_workload(layout);
        println!(
            "test ebpf_probe::{} ... ok ({:.1} s)",
            layout.name,
            started.elapsed().as_secs_f64()
        );
    }
    a_probe_that_cannot_run_is_said_and_counted_and_the_agent_runs_on();
    println!("test ebpf_probe::cannot_run ... ok");
    let started = std::time::Instant::now();
    a_pod_sending_100_calls_a_second_storms_and_one_sending_5_does_not(&layouts[0]);
    println!(
        "test ebpf_probe::api_request_storm ... ok ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

/// A generated pod: the names are an operator Deployment's, the UID and container id
/// made up for the test.
struct Pod {
    namespace: &'static str,
    name: &'static str,
    uid: &'static str,
    container_id: &'static str,
}

const PROBED: Pod = Pod {
    namespace: NAMESPACE,
    name: POD,
    uid: POD_UID,
    container_id: CONTAINER_ID,
};

fn layouts_or_skip() -> Option<Vec<CgroupLayout>> {
    let required = std::env::var("OPSCOPE_REQUIRE_BACKENDS").is_ok_and(|v| v == "1");
    if let Some(reason) = kernel_probe_unavailable(cfg!(feature = "ebpf")) {
        assert!(
            !(required && is_root()),
            "ebpf_probe: OPSCOPE_REQUIRE_BACKENDS=1 as root but {reason}"
        );
        eprintln!("skipping ebpf_probe: {reason}");
        return None;
    }
    Some(CgroupLayout::available())
}

fn mount_tracefs() {
    if Path::new("/sys/kernel/tracing/events/syscalls").is_dir() {
        return;
    }
    let status = Command::new("mount")
        .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "cannot mount tracefs at /sys/kernel/tracing"
    );
}

/// Made for one layout, removed on drop: the pods' cgroups, the kubelet's folders
/// naming them, and a 1 MiB tmpfs.
struct Node {
    dir: tempfile::TempDir,
    cgroups: Vec<PodCgroup>,
    tmpfs: PathBuf,
}

impl Node {
    fn new(layout: &CgroupLayout, pods: &[&Pod]) -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let containers = dir.path().join("containers");
        std::fs::create_dir_all(&containers).expect("container log folder");
        let test = format!("opscope-probe-test-{}", std::process::id());
        let mut cgroups = Vec::new();
        for pod in pods {
            let (namespace, name, uid, id) = (pod.namespace, pod.name, pod.uid, pod.container_id);
            cgroups.push(PodCgroup::create(layout, &test, uid, id).expect("the pod's cgroup"));
            let folder = dir
                .path()
                .join(format!("pods/{namespace}_{name}_{uid}/workload"));
            std::fs::create_dir_all(&folder).expect("pod log folder");
            std::fs::write(
                containers.join(format!("{name}_{namespace}_workload-{id}.log")),
                "",
            )
            .expect("container log link");
        }
        let tmpfs = dir.path().join("full");
        std::fs::create_dir_all(&tmpfs).expect("tmpfs mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1M", "opscope-probe-test"])
            .arg(&tmpfs)
            .status();
        assert!(
            mounted.is_ok_and(|s| s.success()),
            "cannot mount a 1 MiB tmpfs"
        );
        Self {
            cgroups,
            tmpfs,
            dir,
        }
    }

    fn cgroup_procs(&self, pod: usize) -> PathBuf {
        self.cgroups[pod].procs()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.tmpfs).status();
    }
}

/// `cgroup_root` not a cgroup mount: the receiver says so, the agent is ready and
/// takes OTLP all the same, and `opscope_receiver_unavailable_total` counts the reason.
fn a_probe_that_cannot_run_is_said_and_counted_and_the_agent_runs_on() {
    let not_cgroups = tempfile::tempdir().expect("a temp dir");
    let ports = Ports::ANY;
    let config = format!(
        r#"
receivers:
  otlp: {{ protocols: {{ http: {{ endpoint: 127.0.0.1:{http} }} }} }}
  ebpf:
    api_servers: ["127.0.0.1:6443"]
    cgroup_root: {root}
exporters:
  debug: {{}}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    metrics: {{ receivers: [otlp, ebpf], exporters: [debug] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        http = ports.http,
        root = not_cgroups.path().display(),
        health = ports.health,
        metrics = ports.metrics,
    );
    let agent = Opscope::start(&config);
    let ports = agent.ports();
    let logs = agent.logs();
    assert!(
        logs.contains("the kernel probe is not running: cgroups:")
            && logs.contains("is neither a cgroup v2 mount"),
        "{logs}"
    );
    assert_eq!(
        agent.metric_value(
            &ports.metrics_addr(),
            "opscope_receiver_unavailable_total",
            &[("receiver", "ebpf"), ("reason", "cgroups")],
        ),
        1.0
    );
    let response = common::http_post(
        &ports.http_addr(),
        "/v1/metrics",
        &[("content-type", "application/x-protobuf")],
        &[],
    )
    .expect("the OTLP receiver answers");
    assert_eq!(response.status, 200, "the rest of the agent runs on");
}

const STORMING: Pod = Pod {
    namespace: "widget-system",
    name: "widget-operator-6bc4f7d9c8-x2k4p",
    uid: "0f9d8c7b-1111-2222-3333-444455556666",
    container_id: "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b",
};
const QUIET: Pod = Pod {
    namespace: "quiet-system",
    name: "quiet-operator-7d8f9c6b5-q8r2m",
    uid: "1a2b3c4d-5555-6666-7777-888899990000",
    container_id: "1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c",
};

/// Two operator pods send to the API server for 25 s, one 100 times a second and one
/// 5 times; the correlator (threshold 50 a second, held for 10 s here instead of the
/// default 2 minutes) fires `api_request_storm` on the first only.
fn a_pod_sending_100_calls_a_second_storms_and_one_sending_5_does_not(layout: &CgroupLayout) {
    let node = Node::new(layout, &[&STORMING, &QUIET]);
    let api_server = TcpListener::bind("127.0.0.1:0").expect("listen as the API server");
    let port = api_server.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for stream in api_server.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buffer = [0u8; 4096];
                while stream.read(&mut buffer).is_ok_and(|n| n > 0) {}
            });
        }
    });
    let ports = Ports::ANY;
    let config = format!(
        r#"
receivers:
  ebpf:
    api_servers: ["127.0.0.1:{port}"]
    interval: 1s
    cgroup_root: {root}
    pod_logs: {dir}/pods
    container_logs: {dir}/containers
processors:
  operator_tagger: {{}}
  correlator: {{ api_request_storm: {{ min_sends_per_second: 50, duration: 10s, rate_window: 3s }} }}
exporters:
  debug: {{ verbosity: basic }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    metrics: {{ receivers: [ebpf], processors: [operator_tagger, correlator], exporters: [debug] }}
    signals: {{ exporters: [debug] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        root = layout.cgroup_root.display(),
        dir = node.dir.path().display(),
        health = ports.health,
        metrics = ports.metrics,
    );
    let agent = Opscope::start(&config);
    let ports = agent.ports();
    let send = |pod: usize, rate: u64| {
        Command::new(std::env::current_exe().expect("this test binary"))
            .env(
                WORKLOAD,
                format!(
                    "sends|{}|{port}|{rate}|25",
                    node.cgroup_procs(pod).display()
                ),
            )
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start a sending pod")
    };
    let (storming, quiet) = (send(0, 100), send(1, 5));
    let storm_fired = common::wait_until(Duration::from_secs(40), || {
        agent.metric_value(
            &ports.metrics_addr(),
            "opscope_signals_total",
            &[
                ("signal", "api_request_storm"),
                ("cause", "self_triggered_or_retry_storm"),
            ],
        ) >= 1.0
    });
    for pod in [storming, quiet] {
        let output = pod.wait_with_output().expect("the sending pods end");
        assert!(output.status.success());
    }
    let logs = agent.logs();
    assert!(
        storm_fired,
        "no api_request_storm for 100 sends a second:\n{logs}"
    );
    assert!(
        logs.contains("api_request_storm Pod widget-system/widget-operator-6bc4f7d9c8-x2k4p"),
        "the storm is the sending pod's:\n{logs}"
    );
    assert!(
        !logs.contains("api_request_storm Pod quiet-system/"),
        "5 sends a second is no storm:\n{logs}"
    );
}

/// What the workload reports it did.
#[derive(Debug, Default, PartialEq)]
struct Done {
    established: u64,
    refused: u64,
    reset: u64,
    sent_bytes: u64,
    send_calls: u64,
    forks: u64,
    enospc: u64,
}

fn counts_match_the_workload(layout: &CgroupLayout) {
    let node = Node::new(layout, &[&PROBED]);
    // The workload listens there, stops and listens again: an address of the test's
    // own keeps the port its alone meanwhile.
    let api_server = format!("{}.1:{}", own_loopback_block(), free_port());
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let config = format!(
        r#"
receivers:
  ebpf:
    api_servers: ["{api_server}"]
    namespaces: ["*-system"]
    interval: 1s
    cgroup_root: {root}
    pod_logs: {dir}/pods
    container_logs: {dir}/containers
exporters:
  otlp/sink: {{ endpoint: {sink}, tls: {{ insecure: true }} }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    metrics: {{ receivers: [ebpf], exporters: [otlp/sink] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        root = layout.cgroup_root.display(),
        dir = node.dir.path().display(),
        sink = sink.endpoint(),
        health = ports.health,
        metrics = ports.metrics,
    );
    let agent = Opscope::start(&config);
    assert!(
        agent.logs().contains("kernel probe attached"),
        "the probe did not attach:\n{}",
        agent.logs()
    );
    let output = Command::new(std::env::current_exe().expect("this test binary"))
        .env(
            WORKLOAD,
            format!(
                "counts|{}|{api_server}|{}",
                node.cgroup_procs(0).display(),
                node.tmpfs.display()
            ),
        )
        .output()
        .expect("run the workload");
    assert!(
        output.status.success(),
        "the workload failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let done = parse_done(&String::from_utf8_lossy(&output.stdout));
    assert_eq!(done.established, (CONNECTIONS + RESETS) as u64);
    assert_eq!(done.refused, CONNECTIONS as u64);
    assert_eq!(done.reset, RESETS as u64);
    assert_eq!(done.forks, FORKS as u64);
    assert!(done.enospc > 0, "the tmpfs never filled: {done:?}");

    let arrived = sink.wait_for(Duration::from_secs(30), |received| {
        pod_counts(received.resource_metrics()).as_ref() == Some(&done)
    });
    let seen = pod_counts(sink.received().resource_metrics());
    assert!(
        arrived,
        "{}: the probe counted {seen:?}, the workload did {done:?}\n{}",
        layout.name,
        agent.logs()
    );
}

/// The latest totals reported for the test's pod.
fn pod_counts<'a>(resources: impl Iterator<Item = &'a ResourceMetrics>) -> Option<Done> {
    let mut latest = None;
    for resource in resources {
        let attributes = &resource.resource.as_ref()?.attributes;
        if text(attributes, "k8s.pod.uid") != Some(POD_UID) {
            continue;
        }
        assert_eq!(text(attributes, "k8s.namespace.name"), Some(NAMESPACE));
        assert_eq!(text(attributes, "k8s.pod.name"), Some(POD));
        assert_eq!(text(attributes, "container.id"), Some(CONTAINER_ID));
        assert_eq!(text(attributes, "k8s.container.name"), Some("workload"));
        let mut done = Done::default();
        for metric in resource.scope_metrics.iter().flat_map(|s| &s.metrics) {
            let Some(Data::Sum(sum)) = &metric.data else {
                continue;
            };
            for point in &sum.data_points {
                let value = match point.value {
                    Some(number_data_point::Value::AsInt(v)) => v as u64,
                    _ => 0,
                };
                match (metric.name.as_str(), text(&point.attributes, "outcome")) {
                    ("opscope.ebpf.api_server.connections", Some("established")) => {
                        done.established = value
                    }
                    ("opscope.ebpf.api_server.connections", Some("refused")) => {
                        done.refused = value
                    }
                    ("opscope.ebpf.api_server.connections", Some("reset")) => done.reset = value,
                    ("opscope.ebpf.api_server.sent_bytes", _) => done.sent_bytes = value,
                    ("opscope.ebpf.api_server.send_calls", _) => done.send_calls = value,
                    ("opscope.ebpf.process.forks", _) => done.forks = value,
                    ("opscope.ebpf.write.enospc", _) => done.enospc = value,
                    _ => {}
                }
            }
        }
        latest = Some(done);
    }
    latest
}

fn text<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(text) => Some(text.as_str()),
            _ => None,
        }
    })
}

fn parse_done(stdout: &str) -> Done {
    let mut done = Done::default();
    for line in stdout.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value: u64 = value.trim().parse().unwrap_or(0);
        match key {
            "established" => done.established = value,
            "refused" => done.refused = value,
            "reset" => done.reset = value,
            "sent_bytes" => done.sent_bytes = value,
            "send_calls" => done.send_calls = value,
            "forks" => done.forks = value,
            "enospc" => done.enospc = value,
            _ => {}
        }
    }
    done
}

/// The workload, which first moves itself into its pod's cgroup:
/// * `counts|<cgroup.procs>|<host:port>|<tmpfs>` does what it reports on stdout, one
///   `key=value` a line;
/// * `sends|<cgroup.procs>|<port>|<calls a second>|<seconds>` sends to the port at
///   that rate, as an operator's client does to the API server.
fn workload(plan: &str) -> ExitCode {
    let parts: Vec<&str> = plan.split('|').collect();
    match parts.as_slice() {
        ["counts", procs, address, tmpfs] => {
            join_cgroup(procs);
            count_workload(address, tmpfs)
        }
        ["sends", procs, port, rate, seconds] => {
            join_cgroup(procs);
            let (Ok(rate), Ok(seconds)) = (rate.parse::<u64>(), seconds.parse::<u64>()) else {
                eprintln!("bad plan {plan:?}");
                return ExitCode::FAILURE;
            };
            send_at(
                &format!("127.0.0.1:{port}"),
                rate,
                Duration::from_secs(seconds),
            )
        }
        _ => {
            eprintln!("bad plan {plan:?}");
            ExitCode::FAILURE
        }
    }
}

fn join_cgroup(procs: &str) {
    std::fs::write(procs, std::process::id().to_string()).expect("join the pod's cgroup");
}

fn send_at(address: &str, rate: u64, duration: Duration) -> ExitCode {
    let mut client = TcpStream::connect(address).expect("connect to the API server");
    let started = std::time::Instant::now();
    let mut sent = 0u64;
    while started.elapsed() < duration {
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        if sent < due {
            client
                .write_all(b"GET /apis/example.com/v1/widgets HTTP/1.1\r\n\r\n")
                .expect("send");
            sent += 1;
        } else {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    println!("send_calls={sent}");
    ExitCode::SUCCESS
}

fn count_workload(address: &str, tmpfs: &str) -> ExitCode {
    // Established: the listener is this process's too, so that nothing else's
    // connections are in the count; accepting keeps the backlog short.
    let listener = TcpListener::bind(address).expect("listen as the API server");
    let mut kept = None;
    for _ in 0..CONNECTIONS {
        let client = TcpStream::connect(address).expect("connect while listening");
        let (server, _) = listener.accept().expect("accept");
        if kept.is_none() {
            kept = Some((client, server));
        }
    }
    drop(listener);
    let mut refused = 0;
    for _ in 0..CONNECTIONS {
        match TcpStream::connect(address) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => refused += 1,
            other => panic!("expected a refused connection, got {other:?}"),
        }
    }
    // Reset by the server once established: it closes with linger 0.
    let listener = TcpListener::bind(address).expect("listen as the API server again");
    let mut reset = 0;
    for _ in 0..RESETS {
        let mut client = TcpStream::connect(address).expect("connect to be reset");
        let (server, _) = listener.accept().expect("accept");
        socket2::SockRef::from(&server)
            .set_linger(Some(Duration::ZERO))
            .expect("linger 0");
        drop(server);
        // The reset has arrived once a read says so.
        let mut byte = [0u8; 1];
        if client
            .read(&mut byte)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
        {
            reset += 1;
        }
    }
    drop(listener);
    let (mut client, mut server) = kept.expect("a kept connection");
    let payload = [b'x'; SEND_SIZE];
    let mut received = vec![0u8; SEND_SIZE];
    for _ in 0..SENDS {
        // One write(2), one tcp_sendmsg; read back so that the buffers never fill.
        assert_eq!(client.write(&payload).expect("send"), SEND_SIZE);
        server.read_exact(&mut received).expect("receive");
    }

    for _ in 0..FORKS {
        fork_and_wait();
    }

    let mut enospc = 0;
    let mut file =
        std::fs::File::create(Path::new(tmpfs).join("fill")).expect("a file on the tmpfs");
    let chunk = vec![0u8; 64 * 1024];
    for _ in 0..1000 {
        match file.write(&chunk) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => {
                enospc += 1;
                if enospc == 10 {
                    break;
                }
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    println!(
        "established={}\nrefused={refused}\nreset={reset}",
        CONNECTIONS + RESETS
    );
    println!("sent_bytes={}\nsend_calls={SENDS}", SENDS * SEND_SIZE);
    println!("forks={FORKS}\nenospc={enospc}");
    ExitCode::SUCCESS
}

/// A child that exits at once, waited for: one process created.
fn fork_and_wait() {
    // Spawning is one clone of this process (fork or vfork); `true` creates none.
    let status = Command::new("/bin/true").status();
    assert!(status.is_ok_and(|s| s.success()));
}
