//! Acceptance: `testenv-cluster` (what `make cluster` runs), good path and bad input.

mod common;

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{processes_mentioning, run};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn cluster(data_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_testenv-cluster"));
    command
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    command
}

/// Bad input: one line on stderr naming the cause, a failure exit, nothing started or left.
fn assert_refused(out: &Output, data_dir: &Path, cause: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must fail; stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    for word in cause {
        assert!(stderr.contains(word), "{word:?} in {stderr}");
    }
    assert!(
        out.stdout.is_empty(),
        "no KUBECONFIG line: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        processes_mentioning(data_dir),
        Vec::<String>::new(),
        "nothing left running"
    );
    assert!(
        data_dir.read_dir().map_or(true, |mut d| d.next().is_none()),
        "no files left"
    );
}

#[test]
fn a_taken_port_is_refused() {
    let data = tempfile::tempdir().expect("temp dir");
    let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = taken.local_addr().expect("address").port().to_string();
    let out = run(cluster(data.path()).args(["--port", &port]));
    assert_refused(&out, data.path(), &[&format!("port {port}"), "in use"]);
}

#[test]
fn missing_binaries_are_refused() {
    let data = tempfile::tempdir().expect("temp dir");
    let empty = tempfile::tempdir().expect("temp dir");
    let out = run(cluster(data.path()).env("TESTENV_BIN", empty.path()));
    assert_refused(&out, data.path(), &["etcd", "make testenv"]);
}

#[test]
fn a_data_dir_that_is_not_writable_is_refused() {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let under_a_file = file.path().join("data");
    let out = run(&mut cluster(&under_a_file));
    assert_refused(
        &out,
        &under_a_file,
        &[
            "data dir",
            &under_a_file.display().to_string(),
            "not writable",
        ],
    );
}

/// Waits for the `KUBECONFIG=` line; a reader thread lets us give up after a while.
fn kubeconfig_line(child: &mut Child, stderr_log: &Path, timeout: Duration) -> PathBuf {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = tx.send(line.expect("read stdout"));
        }
    });
    let line = rx.recv_timeout(timeout).unwrap_or_else(|_| {
        let stderr = std::fs::read_to_string(stderr_log).unwrap_or_default();
        panic!("no KUBECONFIG= line on stdout; stderr:\n{stderr}")
    });
    let path = line
        .strip_prefix("KUBECONFIG=")
        .unwrap_or_else(|| panic!("unexpected stdout: {line}"));
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "exactly one line on stdout"
    );
    PathBuf::from(path)
}

fn wait_for_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let began = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if began.elapsed() > timeout {
            let _ = child.kill();
            panic!("testenv-cluster did not stop within {timeout:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn it_serves_a_working_kubeconfig_until_sigterm() {
    let data = tempfile::tempdir().expect("temp dir");
    let logs = tempfile::tempdir().expect("temp dir");
    let stderr_log = logs.path().join("stderr.log");
    let stderr = std::fs::File::create(&stderr_log).expect("stderr log");
    let mut child = cluster(data.path())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start testenv-cluster");

    let kubeconfig = kubeconfig_line(&mut child, &stderr_log, Duration::from_secs(120));
    assert!(
        kubeconfig.is_absolute() && kubeconfig.starts_with(data.path()),
        "{}",
        kubeconfig.display()
    );
    let kubectl = testenv::ControlPlane::bin("kubectl").expect("kubectl");
    let out = run(Command::new(kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["get", "--raw", "/readyz"]));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let running = processes_mentioning(data.path());
    for component in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        assert!(
            running
                .iter()
                .any(|p| p.contains(&format!("/{component} "))),
            "{component} in {running:#?}"
        );
    }

    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let status = wait_for_exit(&mut child, Duration::from_secs(30));
    assert!(status.success(), "exits cleanly on SIGTERM: {status}");
    assert_eq!(
        processes_mentioning(data.path()),
        Vec::<String>::new(),
        "nothing left running"
    );
    assert_eq!(
        data.path().read_dir().expect("data dir").count(),
        0,
        "temporary files removed"
    );
}
