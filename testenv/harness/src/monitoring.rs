//! A real Prometheus and a real Alertmanager (built into `testenv/bin` by `make testenv`) on
//! loopback ports, for the controller's health gates. Prometheus evaluates a rule file the
//! test writes (every second) and scrapes nothing; Alertmanager runs alone (no cluster peers)
//! and holds the silences a test creates through its API, as `amtool` would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::process::Proc;
use crate::{Error, bins, ports, wait};

const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A rule file whose one alert, `name`, fires at once (`vector(1)`, no `for`) or never.
pub fn rules(name: &str, firing: bool) -> String {
    let expr = if firing { "vector(1)" } else { "vector(0) > 1" };
    format!(
        "groups:\n  - name: e2e\n    interval: 1s\n    rules:\n      - alert: {name}\n        \
         expr: {expr}\n        labels:\n          severity: critical\n      - alert: E2ENeverFires\n        \
         expr: vector(0) > 1\n"
    )
}

/// A Prometheus with a rule file the test controls. Dropping it stops the process.
#[derive(Debug)]
pub struct Prometheus {
    proc: Proc,
    port: u16,
    rules: PathBuf,
    _dir: TempDir,
}

impl Prometheus {
    /// Starts Prometheus with these rules and waits until it serves its API.
    pub async fn start(rules: &str) -> Result<Self, Error> {
        let dir =
            TempDir::with_prefix("e2e-prometheus-").map_err(Error::io("create a temp dir"))?;
        let rules_path = dir.path().join("rules.yml");
        write(&rules_path, rules)?;
        let config = "global:\n  evaluation_interval: 1s\nrule_files:\n  - rules.yml\n";
        write(&dir.path().join("prometheus.yml"), config)?;
        let port = ports::pick()?;
        let args = vec![
            format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--log.level=warn".to_owned(),
        ];
        let proc = Proc::spawn("prometheus", bins::bin("prometheus")?, args, dir.path())?;
        let mut prometheus = Self {
            proc,
            port,
            rules: rules_path,
            _dir: dir,
        };
        prometheus.wait_ready().await?;
        Ok(prometheus)
    }

    /// `http://127.0.0.1:<port>`, for `--prometheus-url`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Replaces the rules and has Prometheus read them (SIGHUP), as a rule change does in a
    /// cluster; they take effect at its next evaluation.
    pub fn set_rules(&self, rules: &str) -> Result<(), Error> {
        write(&self.rules, rules)?;
        self.proc.reload();
        Ok(())
    }

    /// The names of the active alerts, with their state, as its API lists them.
    pub async fn active_alerts(&self) -> Result<String, String> {
        let (status, body) = wait::http(self.port, "GET", "/api/v1/alerts", None).await?;
        if status == 200 {
            Ok(body)
        } else {
            Err(format!("HTTP {status}: {body}"))
        }
    }

    /// Stops it: the port refuses connections until `start_again`.
    pub fn stop(&mut self) {
        self.proc.stop(STOP_GRACE);
    }

    pub async fn start_again(&mut self) -> Result<(), Error> {
        self.proc.start_again()?;
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> Result<(), Error> {
        let port = self.port;
        wait::until_ready(&mut self.proc, READY_TIMEOUT, async || ready(port).await).await
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.proc.stop(STOP_GRACE);
    }
}

/// An Alertmanager without peers. Dropping it stops the process.
#[derive(Debug)]
pub struct Alertmanager {
    proc: Proc,
    port: u16,
    _dir: TempDir,
}

impl Alertmanager {
    pub async fn start() -> Result<Self, Error> {
        let dir =
            TempDir::with_prefix("e2e-alertmanager-").map_err(Error::io("create a temp dir"))?;
        let config = dir.path().join("alertmanager.yml");
        write(
            &config,
            "route:\n  receiver: none\nreceivers:\n  - name: none\n",
        )?;
        let port = ports::pick()?;
        let args = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.path={}", dir.path().join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            // No gossip with peers: it would listen on 0.0.0.0:9094.
            "--cluster.listen-address=".to_owned(),
            "--log.level=warn".to_owned(),
        ];
        let proc = Proc::spawn("alertmanager", bins::bin("alertmanager")?, args, dir.path())?;
        let mut alertmanager = Self {
            proc,
            port,
            _dir: dir,
        };
        wait::until_ready(&mut alertmanager.proc, READY_TIMEOUT, async || {
            ready(port).await
        })
        .await?;
        Ok(alertmanager)
    }

    /// `http://127.0.0.1:<port>`, for `--alertmanager-url`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Silences `alertname=<alert>` for an hour through the API (`POST /api/v2/silences`);
    /// returns the silence's id.
    pub async fn silence(&self, alert: &str) -> Result<String, String> {
        let body = serde_json::json!({
            "matchers": [{"name": "alertname", "value": alert, "isRegex": false, "isEqual": true}],
            "startsAt": "2000-01-01T00:00:00Z",
            "endsAt": "2999-01-01T00:00:00Z",
            "createdBy": "e2e",
            "comment": "known: the rollout may go on",
        });
        let (status, answer) = wait::http(
            self.port,
            "POST",
            "/api/v2/silences",
            Some(&body.to_string()),
        )
        .await?;
        if status == 200 {
            Ok(answer)
        } else {
            Err(format!("HTTP {status}: {answer}"))
        }
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        self.proc.stop(STOP_GRACE);
    }
}

async fn ready(port: u16) -> Result<(), String> {
    match wait::http(port, "GET", "/-/ready", None).await? {
        (200, _) => Ok(()),
        (status, body) => Err(format!("GET /-/ready: HTTP {status}: {body}")),
    }
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(Error::io(format!("write {}", path.display())))
}
