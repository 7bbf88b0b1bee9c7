//! The binary refuses what it cannot start with: exit code 2 and a message that names the
//! problem and the fix.

mod support;

use std::{
    process::{Output, Stdio},
    time::{Duration, Instant},
};
use support::{agent, stderr};

fn refused(output: Output, expected: &[&str]) {
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let err = stderr(&output);
    for part in expected {
        assert!(err.contains(part), "{part:?} not in {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn node_name_unset() {
    let output = agent().output().unwrap();
    refused(output, &["NODE_NAME", "--node-name", "downward API"]);
}

#[test]
fn boot_id_file_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-boot-id");
    let output = agent()
        .env("NODE_NAME", "n1")
        .args(["--boot-id-file".as_ref(), missing.as_os_str()])
        .output()
        .unwrap();
    refused(output, &[missing.to_str().unwrap(), "--boot-id-file"]);

    // A directory cannot be read as a file either.
    let output = agent()
        .env("NODE_NAME", "n1")
        .env("BOOT_ID_FILE", dir.path())
        .output()
        .unwrap();
    refused(
        output,
        &[dir.path().to_str().unwrap(), "cannot read the boot id"],
    );
}

#[test]
fn boot_id_file_empty() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let output = agent()
        .env("NODE_NAME", "n1")
        .arg("--boot-id-file")
        .arg(file.path())
        .output()
        .unwrap();
    refused(output, &[file.path().to_str().unwrap(), "is empty"]);
}

#[test]
fn bad_flag_values() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--reboot-timeout", "soon"],
            &["--reboot-timeout", "such as `30s`"],
        ),
        (
            &["--annotation-prefix", "Bad_Prefix"],
            &["--annotation-prefix", "DNS subdomain"],
        ),
        (
            &["--reboot-method", "reset"],
            &["--reboot-method", "command"],
        ),
        (
            &["--reboot-command", ""],
            &["--reboot-command", "systemctl reboot"],
        ),
        (&["--log-format", "xml"], &["--log-format", "json"]),
    ];
    for (flags, expected) in cases {
        let output = agent()
            .env("NODE_NAME", "n1")
            .args(*flags)
            .output()
            .unwrap();
        refused(output, expected);
    }
    // The same checks apply to the environment variables.
    let output = agent()
        .env("NODE_NAME", "n1")
        .env("REBOOT_TIMEOUT", "0s")
        .output()
        .unwrap();
    refused(output, &["longer than zero"]);
}

/// Without a reachable API server the agent keeps trying (never exits by itself) and stops
/// cleanly, within seconds, on SIGTERM; its log lines name the node.
#[test]
fn waits_for_the_api_server_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, KUBECONFIG_OF_A_CLOSED_PORT).unwrap();
    let boot_id = dir.path().join("boot_id");
    std::fs::write(&boot_id, "b1\n").unwrap();
    let child = agent()
        .env("NODE_NAME", "n7")
        .env("KUBECONFIG", &kubeconfig)
        .env("BOOT_ID_FILE", &boot_id)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let sent = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "took {:?}",
        sent.elapsed()
    );
    assert!(output.status.success(), "{output:?}");
    let err = stderr(&output);
    assert!(err.contains("node=n7"), "{err}");
    assert!(err.contains("watching the node failed"), "{err}");
    assert!(err.contains("shutting down"), "{err}");
}

const KUBECONFIG_OF_A_CLOSED_PORT: &str = r#"
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"#;
