//! What the `ebpf` receiver's kernel probe costs under a loopback load of TCP
//! connections to the address it watches as the API server: the agent's CPU with the
//! receiver off and on (interleaved rounds), the load generator's own CPU (the probe's
//! programs run in the connecting and sending threads), and the kernel's own count
//! of the time spent in the probe's programs (`kernel.bpf_stats_enabled`).
//!
//! As root, with an opscope built with the `ebpf` feature:
//!
//! ```sh
//! cargo build --release -p opscope --features ebpf
//! cargo run --release -p opscope-bench --example ebpf_overhead -- target/release/opscope 20000 20 3
//! ```
//! (arguments: the agent, connections a second, seconds per run, rounds)

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use opscope_bench::proc_stats;
use socket2::{Domain, SockRef, Socket, Type};

const CLIENT_THREADS: u64 = 2;
/// Source addresses the clients take turns with: 20 k connections a second from one
/// address would reuse each ephemeral port within about a second and a half.
const SOURCES: u8 = 16;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let agent = args
        .first()
        .cloned()
        .unwrap_or("target/release/opscope".into());
    let rate: u64 = args.get(1).map_or(Ok(20_000), |a| a.parse())?;
    let seconds: u64 = args.get(2).map_or(Ok(20), |a| a.parse())?;
    let rounds: u64 = args.get(3).map_or(Ok(3), |a| a.parse())?;
    let ticks_per_second = clock_ticks();
    let stats_before = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").ok();
    std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1")?;
    println!(
        "| round | probe | connections/s achieved | agent CPU (% of a core) | load generator CPU (% of a core) | probe programs (ns per run, runs/s) |"
    );
    println!("|---|---|---|---|---|---|");
    for round in 1..=rounds {
        for probe in [false, true] {
            let run = measure(
                &agent,
                probe,
                rate,
                Duration::from_secs(seconds),
                ticks_per_second,
            )?;
            println!(
                "| {round} | {} | {:.0} | {:.2} | {:.1} | {} |",
                if probe { "on" } else { "off" },
                run.connections_per_second,
                run.agent_cpu_percent,
                run.load_cpu_percent,
                run.programs
            );
        }
    }
    if let Some(previous) = stats_before {
        std::fs::write("/proc/sys/kernel/bpf_stats_enabled", previous.trim())?;
    }
    Ok(())
}

struct Run {
    connections_per_second: f64,
    agent_cpu_percent: f64,
    load_cpu_percent: f64,
    programs: String,
}

fn measure(
    agent: &str,
    probe: bool,
    rate: u64,
    duration: Duration,
    ticks_per_second: f64,
) -> anyhow::Result<Run> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&"127.0.0.1:0".parse::<std::net::SocketAddr>()?.into())?;
    socket.listen(4096)?;
    let listener: TcpListener = socket.into();
    let address = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let accepting = {
        let stop = stop.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                // Closed with a reset too: a server that closes first keeps the
                // connection in TIME_WAIT, and the client's next use of the port
                // waits out a SYN retransmission.
                if let Ok(stream) = stream {
                    set_linger_zero(&stream);
                }
            }
        })
    };
    let dir = std::env::temp_dir().join(format!("opscope-ebpf-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("opscope.yaml");
    let health = free_port()?;
    let (receivers, ebpf) = match probe {
        true => (
            "[otlp, ebpf]",
            format!(
                "  ebpf: {{ api_servers: [\"{address}\"], include_host_processes: true, namespaces: [] }}"
            ),
        ),
        false => ("[otlp]", String::new()),
    };
    std::fs::write(
        &config,
        format!(
            r#"
receivers:
  otlp: {{ protocols: {{ grpc: {{ endpoint: 127.0.0.1:{otlp} }} }} }}
{ebpf}
exporters:
  debug: {{ verbosity: basic }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    metrics: {{ receivers: {receivers}, exporters: [debug] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{telemetry} }}
"#,
            otlp = free_port()?,
            telemetry = free_port()?,
        ),
    )?;
    let log = dir.join("agent.log");
    let mut child = Command::new(agent)
        .args(["run", "-c"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let ready = wait_for(
        &log,
        if probe {
            "kernel probe attached"
        } else {
            "opscope is ready"
        },
    );
    if !ready {
        let _ = child.kill();
        anyhow::bail!(
            "the agent did not start:\n{}",
            std::fs::read_to_string(&log)?
        );
    }
    let pid = child.id();
    let connected = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..CLIENT_THREADS)
        .map(|_| {
            let (stop, connected) = (stop.clone(), connected.clone());
            thread::spawn(move || connect_at(address, rate / CLIENT_THREADS, &stop, &connected))
        })
        .collect();
    // Past the first connections' warm-up, then measured.
    thread::sleep(Duration::from_secs(2));
    let (agent_before, load_before) = (proc_stats::sample(pid)?.cpu_ticks, own_cpu_ticks()?);
    let programs_before = program_stats(pid);
    let connected_before = connected.load(Ordering::Relaxed);
    let started = Instant::now();
    thread::sleep(duration);
    let elapsed = started.elapsed().as_secs_f64();
    let (agent_after, load_after) = (proc_stats::sample(pid)?.cpu_ticks, own_cpu_ticks()?);
    let programs_after = program_stats(pid);
    let connections = connected.load(Ordering::Relaxed) - connected_before;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.join();
    }
    let _ = TcpStream::connect(address);
    let _ = accepting.join();
    stop_agent(&mut child);
    let _ = std::fs::remove_dir_all(&dir);
    let percent = |ticks: u64| ticks as f64 / ticks_per_second / elapsed * 100.0;
    let programs = programs_after
        .iter()
        .map(|(name, (time, runs))| {
            let (time_before, runs_before) = programs_before.get(name).copied().unwrap_or((0, 0));
            let runs = runs - runs_before;
            let per_run = (time - time_before) as f64 / runs.max(1) as f64;
            format!("{name} {per_run:.0} ns, {:.0}/s", runs as f64 / elapsed)
        })
        .collect::<Vec<_>>()
        .join("; ");
    Ok(Run {
        connections_per_second: connections as f64 / elapsed,
        agent_cpu_percent: percent(agent_after - agent_before),
        load_cpu_percent: percent(load_after - load_before),
        programs: if programs.is_empty() {
            "–".into()
        } else {
            programs
        },
    })
}

/// Connects `rate` times a second from the loopback source addresses in turn, writes
/// 64 bytes, and closes with a reset (linger 0) so that no TIME_WAIT socket holds a
/// port.
fn connect_at(address: std::net::SocketAddr, rate: u64, stop: &AtomicBool, connected: &AtomicU64) {
    let started = Instant::now();
    let mut done = 0u64;
    let payload = [b'x'; 64];
    while !stop.load(Ordering::Relaxed) {
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        if done >= due {
            thread::sleep(Duration::from_micros(200));
            continue;
        }
        let source =
            std::net::SocketAddr::from(([127, 0, 0, 1 + (done % SOURCES as u64) as u8], 0));
        // A reset now and then (a port whose last use the server has not forgotten
        // yet) is left out of the rate.
        if let Ok(mut stream) = connect_from(source, address) {
            let _ = stream.write(&payload);
            set_linger_zero(&stream);
            connected.fetch_add(1, Ordering::Relaxed);
        }
        done += 1;
    }
}

fn connect_from(
    source: std::net::SocketAddr,
    to: std::net::SocketAddr,
) -> std::io::Result<TcpStream> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.bind(&source.into())?;
    socket.connect(&to.into())?;
    Ok(socket.into())
}

fn set_linger_zero(stream: &TcpStream) {
    let _ = SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// Run time (ns) and runs of each BPF program the agent holds, by name, from the
/// descriptors' fdinfo (counted while `kernel.bpf_stats_enabled` is 1).
fn program_stats(pid: u32) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut stats = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return stats;
    };
    for entry in entries.flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let field = |key: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(key))
                .map(|v| v.trim().to_string())
        };
        let (Some(tag), Some(time), Some(runs)) =
            (field("prog_tag:"), field("run_time_ns:"), field("run_cnt:"))
        else {
            continue;
        };
        let name = program_name(&tag).unwrap_or(tag);
        let (time, runs) = (time.parse().unwrap_or(0), runs.parse().unwrap_or(0));
        let slot = stats.entry(name).or_insert((0, 0));
        slot.0 += time;
        slot.1 += runs;
    }
    stats
}

/// The name of a loaded program by its tag, from bpftool when it is installed.
fn program_name(tag: &str) -> Option<String> {
    let output = Command::new("bpftool")
        .args(["prog", "show", "tag", tag])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let name = text
        .split_whitespace()
        .skip_while(|w| *w != "name")
        .nth(1)?;
    Some(name.to_string())
}

fn stop_agent(child: &mut Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn wait_for(log: &std::path::Path, line: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if std::fs::read_to_string(log).is_ok_and(|text| text.contains(line)) {
            return true;
        }
        thread::sleep(Duration::from_millis(50));
    }
    false
}

fn own_cpu_ticks() -> anyhow::Result<u64> {
    Ok(proc_stats::sample(std::process::id())?.cpu_ticks)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
