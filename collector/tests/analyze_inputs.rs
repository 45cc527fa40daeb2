//! `opscope analyze` on inputs that are too large or not files, generated in a
//! temporary directory: a JSON document is read item by item and refused past its
//! bounds, naming the file; a symlink loop, a FIFO or a device is skipped and named,
//! never opened, and the rest of the input is analysed.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest an analysis of these inputs may take (a FIFO opened would block for ever).
const DEADLINE: Duration = Duration::from_secs(300);

fn fixtures(scenario: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/analyze")
        .join(scenario)
}

/// `opscope analyze --format json` on the paths, killed past the deadline.
fn analyze(paths: &[&Path]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["analyze", "--format", "json"])
        .args(paths)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run opscope analyze");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("opscope analyze still running after {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn signals(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// The summary line `--format json` prints last on stderr.
fn summary(stderr: &str) -> &str {
    stderr.lines().last().unwrap_or_default()
}

fn gzip(content: &[u8]) -> Vec<u8> {
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gzip.write_all(content).expect("gzip");
    gzip.finish().expect("gzip")
}

/// Copies the status-write-loop scenario into `dir` with its audit log turned into
/// a pretty-printed, gzipped `EventList` (keys sorted: `kind` after `items`).
fn status_write_loop_with_an_event_list(dir: &Path) {
    let scenario = fixtures("status-write-loop");
    for entry in std::fs::read_dir(&scenario).expect("scenario").flatten() {
        let pod = entry.path();
        if pod.is_dir() {
            let target = dir.join(entry.file_name()).join("manager");
            std::fs::create_dir_all(&target).expect("mkdir");
            std::fs::copy(pod.join("manager/0.log"), target.join("0.log")).expect("copy");
        }
    }
    let audit = std::fs::read_to_string(scenario.join("kube-apiserver-audit.log")).expect("audit");
    let items: Vec<Value> = audit
        .lines()
        .map(|line| serde_json::from_str(line).expect("an event"))
        .collect();
    assert_eq!(items.len(), 180);
    let list = serde_json::json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": items});
    let pretty = serde_json::to_string_pretty(&list).expect("json");
    assert!(pretty.find("\"items\"") < pretty.find("\"kind\""));
    std::fs::write(dir.join("webhook-batches.json.gz"), gzip(pretty.as_bytes())).expect("write");
}

#[test]
fn json_documents_are_read_item_by_item_and_refused_past_their_bounds_naming_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    status_write_loop_with_an_event_list(dir.path());
    // Generated: 72 MB of small objects in one document, gzipped to 140 KB (as
    // gzip members one after another, which inflate one after another).
    let piece = b"{\"a\":12},".repeat(1 << 17);
    let member = gzip(&piece);
    let mut small_objects = gzip(b"{\"kind\":\"List\",\"items\":[");
    for _ in 0..(72_000_000 / piece.len()) {
        small_objects.extend(&member);
    }
    small_objects.extend(gzip(b"{}]}"));
    let small_objects_path = dir.path().join("small-objects.json.gz");
    std::fs::write(&small_objects_path, small_objects).expect("write");
    // Generated: an audit EventList of 1 000 001 `{}`.
    let mut empty_events =
        b"{\"kind\":\"EventList\",\"apiVersion\":\"audit.k8s.io/v1\",\"items\":[".to_vec();
    empty_events.extend(b"{},".repeat(1_000_000));
    empty_events.extend(b"{}]}");
    let empty_events_path = dir.path().join("empty-events.json");
    std::fs::write(&empty_events_path, empty_events).expect("write");

    let output = analyze(&[dir.path()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: skipped: a JSON document longer than 64 MiB",
            small_objects_path.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{}: skipped: a JSON document of 1000001 items, more than the 1000000 read from one document",
            empty_events_path.display()
        )),
        "{stderr}"
    );
    // The 180 events of the list are 180 records, as the 180 lines of the audit log.
    assert_eq!(
        summary(&stderr),
        "4 file(s) (2 skipped, named above), 366 record(s) (0 malformed), 186 reconcile(s), 180 write(s), 1 signal(s)"
    );
    let found = signals(&output);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["signal"], "reconcile_loop");
    assert_eq!(found[0]["cause"], "field_churn:status.lastSyncTime");
}

fn mkfifo(path: &Path) {
    let name = CString::new(path.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: `name` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
}

/// Generated: a Widget reconciled every half second for a minute (a loop), its
/// lines split over two operator logs whose times interleave.
fn write_a_loop_in_two_files(dir: &Path) {
    let mut files = [String::new(), String::new()];
    for tick in 0..120u32 {
        let (second, millis) = (tick / 2, (tick % 2) * 500);
        files[(tick % 2) as usize].push_str(&format!(
            "{{\"level\":\"info\",\"ts\":\"2024-05-01T12:{:02}:{:02}.{millis:03}Z\",\"msg\":\"Reconcile successful\",\"controller\":\"widget\",\"controllerKind\":\"Widget\",\"namespace\":\"shop\",\"name\":\"w1\",\"reconcileID\":\"r{tick}\"}}\n",
            second / 60,
            second % 60,
        ));
    }
    std::fs::write(dir.join("operator-a.log"), &files[0]).expect("write");
    std::fs::write(dir.join("operator-b.log"), &files[1]).expect("write");
}

#[test]
fn bad_entries_are_skipped_and_named_and_the_rest_is_analysed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let captured = dir.path().join("captured");
    std::fs::create_dir(&captured).expect("mkdir");
    write_a_loop_in_two_files(&captured);
    std::os::unix::fs::symlink(&captured, captured.join("back")).expect("symlink");
    std::os::unix::fs::symlink("self.log", captured.join("self.log")).expect("symlink");
    std::os::unix::fs::symlink("/dev/zero", captured.join("zero.log")).expect("symlink");
    mkfifo(&captured.join("fifo.log"));

    let output = analyze(&[&captured, Path::new("/dev/zero")]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let named = |entry: &str| captured.join(entry).display().to_string();
    for line in [
        format!("{}: skipped: a FIFO; not read", named("fifo.log")),
        format!("{}: skipped: a symlink loop", named("self.log")),
        format!(
            "{}: skipped: a character device; not read",
            named("zero.log")
        ),
        "/dev/zero: skipped: a character device; not read".to_string(),
        format!(
            "{}: skipped: the directory {} again; read once",
            named("back"),
            captured.display()
        ),
    ] {
        assert!(stderr.lines().any(|l| l == line), "{line}\n{stderr}");
    }
    assert_eq!(
        summary(&stderr),
        "2 file(s) (5 skipped, named above), 120 record(s) (0 malformed), 120 reconcile(s), 0 write(s), 1 signal(s)"
    );
    let found = signals(&output);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["signal"], "reconcile_loop");
    assert_eq!(found[0]["object"]["name"], "w1");
}
