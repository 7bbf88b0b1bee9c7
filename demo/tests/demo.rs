//! `make demo` in a short configuration: exit status and summary; and Ctrl-C in the middle
//! stops everything it started.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

fn demo() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_demo"));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

#[test]
fn a_short_demo_reboots_every_node_within_budget() {
    let out = demo()
        .args([
            "--nodes",
            "4",
            "--max-unavailable",
            "2",
            "--reboot-seconds",
            "1",
            "--zones",
            "2",
        ])
        .output()
        .expect("demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("$ kubectl annotate node sim-4 reboot-needed=true"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[zone-a") && stdout.contains("[zone-b"),
        "each node's zone is shown: {stdout}"
    );
    assert!(
        stdout.contains("rebooted:                 4 of 4 nodes requested"),
        "{stdout}"
    );
    let most: usize = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("most unavailable at once: "))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("the summary reports the most unavailable nodes");
    assert!(
        (1..=2).contains(&most),
        "{most} unavailable at once with a budget of 2"
    );
    // The defaults: a zone budget of 1 and a soak of 1 s, both shown as they happen.
    assert!(
        stdout.contains("ideal time:               4.0 s"),
        "{stdout}"
    );
    assert!(
        stdout.contains("-> soaking"),
        "a node soaking after its reboot is shown: {stdout}"
    );
    assert!(
        stdout.contains("zone budget full") || stdout.contains("budget full"),
        "a waiting node shows why: {stdout}"
    );
}

/// Every process whose command line names `dir`.
fn processes_under(dir: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(dir))
        .collect()
}

#[test]
fn a_reader_that_goes_away_does_not_crash_the_demo() {
    let mut child = demo()
        .args([
            "--nodes",
            "2",
            "--max-unavailable",
            "1",
            "--reboot-seconds",
            "1",
        ])
        .spawn()
        .expect("demo runs");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    drop(stdout);
    let status = child.wait().unwrap();
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert!(
        status.success(),
        "the demo finished its run: {status} {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn ctrl_c_in_the_middle_leaves_nothing_behind() {
    let mut child = demo()
        .args(["--nodes", "3", "--reboot-seconds", "30"])
        .spawn()
        .expect("demo runs");
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let mut dir = None;
    for line in lines.by_ref() {
        if let Some(rest) = line.strip_prefix("demo: logs of every component are in ") {
            dir = Some(rest.to_owned());
        }
        if line.contains("-> rebooting") {
            break;
        }
    }
    // Keep reading, as a terminal would, until the demo exits.
    let reader = std::thread::spawn(move || lines.count());
    let dir = dir.expect("the demo names its directory");
    assert!(
        !processes_under(&dir).is_empty(),
        "the demo's processes run"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "interrupted");
    let start = Instant::now();
    while !processes_under(&dir).is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        processes_under(&dir),
        Vec::<String>::new(),
        "processes left behind"
    );
    assert!(!std::path::Path::new(&dir).exists(), "{dir} left behind");
}
