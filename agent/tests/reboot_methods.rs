//! Each reboot method's real code path, run by the real binary with the hidden, test-only
//! `--reboot-once-for-test` flag, in places where a reboot cannot hurt the machine.

mod support;

use std::{
    os::unix::process::ExitStatusExt,
    process::{Command, Stdio},
    time::Duration,
};
use support::{AGENT, reboot_once, stderr, wait_for_file};

/// reboot(2) from a non-initial PID namespace ends that namespace's init with SIGHUP (for a
/// restart) instead of rebooting; `unshare --fork` passes the signal on to its own exit.
#[test]
fn syscall_reboots_the_pid_namespace_it_runs_in() {
    let status = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            AGENT.as_str(),
            "--reboot-once-for-test",
            "--reboot-method",
            "syscall",
        ])
        .env_clear()
        .status()
        .expect("util-linux `unshare` must be installed");
    assert_eq!(status.signal(), Some(libc_sighup()), "{status:?}");
}

fn libc_sighup() -> i32 {
    nix::sys::signal::Signal::SIGHUP as i32
}

/// The guard that keeps a mistaken test run from rebooting the test machine.
#[test]
fn syscall_test_mode_refuses_to_run_outside_its_own_pid_namespace() {
    let output = reboot_once(&["--reboot-method", "syscall"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        stderr(&output).contains("unshare --pid --fork"),
        "{output:?}"
    );
}

/// Runs the agent's signal method against a bash process that traps `trap_name` and records
/// it; whether the target got it.
fn signal_reaches_a_trap(trap_name: &str, flags: &[&str]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let (ready, got) = (dir.path().join("ready"), dir.path().join("got"));
    let script = format!(
        r#"trap 'echo {trap_name} > "$GOT"; exit 0' {trap_name}; touch "$READY"; while :; do sleep 0.05; done"#
    );
    let mut target = Command::new("bash")
        .args(["-c", &script])
        .env("READY", &ready)
        .env("GOT", &got)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for_file(&ready, Duration::from_secs(10)),
        "the target never got ready"
    );

    let pid = target.id().to_string();
    let mut args = vec!["--reboot-method", "signal", "--signal-target-pid", &pid];
    args.extend(flags);
    let output = reboot_once(&args).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let arrived = wait_for_file(&got, Duration::from_secs(10));
    if !arrived {
        let _ = target.kill();
    }
    let status = target.wait().unwrap();
    if arrived {
        assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), trap_name);
        assert!(status.success(), "{status:?}");
    }
    arrived
}

/// SIGRTMIN+5 as bash (and systemd) number it, by default.
#[test]
fn signal_sends_sigrtmin_plus_5_to_the_target() {
    assert!(
        signal_reaches_a_trap("RTMIN+5", &[]),
        "the target got no RTMIN+5"
    );
}

/// `--reboot-signal`, as kured's: the number given.
#[test]
fn signal_sends_the_reboot_signal_given() {
    assert!(
        signal_reaches_a_trap("USR1", &["--reboot-signal", "10"]),
        "the target got no USR1"
    );
}

#[test]
fn signal_to_a_missing_process_is_an_error() {
    let output = reboot_once(&[
        "--reboot-method",
        "signal",
        "--signal-target-pid",
        "2147483647",
    ])
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let err = stderr(&output);
    assert!(
        err.contains("PID 2147483647") && err.contains("hostPID"),
        "{err}"
    );
}

#[test]
fn command_runs_in_the_agents_own_mount_namespace_when_told_to() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rebooted");
    let command = format!("touch {}", file.display());
    let output = reboot_once(&["--host-mount-namespace=false", "--reboot-command", &command])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(file.exists());
}

/// Runs `script` with `sh` as PID 1 of a "miniature host": new PID and mount namespaces with
/// their own /proc, so that /proc/1/ns/mnt is this `sh`'s mount namespace. (The real PID 1's
/// namespaces are out of reach in a sandboxed test machine, and must not be touched anyway.)
fn in_miniature_host(script: &str, env: &[(&str, &std::ffi::OsStr)]) -> std::process::Output {
    let mut command = Command::new("unshare");
    command.args(["--pid", "--fork", "--mount-proc", "sh", "-c", script]);
    command.env("AGENT", AGENT.as_str());
    for (name, value) in env {
        command.env(name, value);
    }
    command
        .output()
        .expect("util-linux `unshare` must be installed")
}

/// In the miniature host, the agent runs in a mount namespace of its own whose copy of `dir` is
/// hidden under a tmpfs. The command writes `dir/rebooted`, which the test sees only if the
/// agent really entered the mount namespace of PID 1 (where `dir` is not hidden). PID 1 must
/// stay the outer `sh` (no `exec unshare`), or it would move into the private namespace too.
fn touch_from_a_private_mount_namespace(
    host_mount_namespace: bool,
) -> (std::process::Output, bool) {
    let dir = tempfile::tempdir().unwrap();
    let agent = format!(
        r#"exec "$AGENT" --reboot-once-for-test --host-mount-namespace={host_mount_namespace} \
           --reboot-command "touch $DIR/rebooted""#
    );
    let script = format!(
        r#"unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs "$DIR" && {agent}'"#
    );
    let output = in_miniature_host(&script, &[("DIR", dir.path().as_os_str())]);
    (output, dir.path().join("rebooted").exists())
}

#[test]
fn command_enters_the_mount_namespace_of_pid_1() {
    let (output, seen_by_pid_1) = touch_from_a_private_mount_namespace(true);
    assert!(output.status.success(), "{output:?}");
    assert!(
        seen_by_pid_1,
        "the command did not run in PID 1's mount namespace: {output:?}"
    );

    // The control: without setns the file lands in the private tmpfs, out of the test's sight.
    let (output, seen_by_pid_1) = touch_from_a_private_mount_namespace(false);
    assert!(output.status.success(), "{output:?}");
    assert!(
        !seen_by_pid_1,
        "the private namespace leaked; the test above proves nothing"
    );
}

#[test]
fn a_failing_command_is_reported() {
    let output = reboot_once(&["--host-mount-namespace=false", "--reboot-command", "false"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("the reboot command `false` failed (exit status: 1)"),
        "{output:?}"
    );
}

/// Through PID 1's mount namespace the command's own error output is reported too.
#[test]
fn a_failing_command_in_the_mount_namespace_of_pid_1_is_reported() {
    let script = r#"exec "$AGENT" --reboot-once-for-test --reboot-command "sh -c no-such-thing""#;
    let output = in_miniature_host(script, &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let err = stderr(&output);
    assert!(
        err.contains("failed (exit status: 127)") && err.contains("no-such-thing: not found"),
        "{err}"
    );
}

#[test]
fn a_missing_command_is_reported() {
    let output = reboot_once(&[
        "--host-mount-namespace=false",
        "--reboot-command",
        "/no/such/reboot",
    ])
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).contains("cannot start the reboot command `/no/such/reboot`"));
}

/// Through PID 1's mount namespace, the re-executed agent reports it (exit 127).
#[test]
fn a_missing_command_in_the_mount_namespace_of_pid_1_is_reported() {
    let script = r#"exec "$AGENT" --reboot-once-for-test --reboot-command "/no/such/reboot now""#;
    let output = in_miniature_host(script, &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let err = stderr(&output);
    assert!(err.contains("exit status: 127"), "{err}");
    assert!(
        err.contains("cannot run the command in the mount namespace /proc/1/ns/mnt: ENOENT"),
        "{err}"
    );
}

/// The architecture of the agent under test is the one the run asks for
/// (`REBOOT_AGENT_ARCH`, as Rust names it), else this machine's: hack/test-arm64.sh must not
/// pass by testing the amd64 binary.
#[test]
fn the_agent_under_test_is_the_architecture_asked_for() {
    let expected =
        std::env::var("REBOOT_AGENT_ARCH").unwrap_or_else(|_| std::env::consts::ARCH.to_owned());
    let elf = std::fs::read(AGENT.as_str()).expect("the agent under test");
    assert!(elf.starts_with(b"\x7fELF"), "{} is not an ELF file", *AGENT);
    // e_machine, at offset 18 of the ELF header.
    let machine = match u16::from_le_bytes([elf[18], elf[19]]) {
        0x3e => "x86_64",
        0xb7 => "aarch64",
        other => panic!("{}: e_machine {other:#x}", *AGENT),
    };
    assert_eq!(machine, expected, "{}", *AGENT);
}
