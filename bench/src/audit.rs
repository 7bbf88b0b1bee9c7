//! How the benchmark counts API requests: the API server's own audit log of every request made
//! by the benchmark's ServiceAccounts (namespace [`crate::identity::NAMESPACE`]), one event per
//! request (stage RequestReceived), each naming the ServiceAccount that sent it. The programs
//! measured are not changed and talk to the API server directly.

use anyhow::Context;
use k8s_openapi::jiff::Timestamp;
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::SystemTime,
};

/// A request as the audit log names it: verb, resource (with its subresource) and object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestKind {
    pub verb: String,
    pub resource: String,
    pub name: Option<String>,
}

impl RequestKind {
    /// `verb resource[/subresource]`, as in `patch nodes/status`.
    pub fn label(&self) -> String {
        format!("{} {}", self.verb, self.resource)
    }
}

/// The audit policy and log of one control plane.
#[derive(Debug, Clone)]
pub struct Audit {
    policy: PathBuf,
    log: PathBuf,
}

/// One audited request.
#[derive(Debug, Clone)]
pub struct Audited {
    pub at: SystemTime,
    pub user: String,
    pub kind: RequestKind,
}

impl Audit {
    /// Writes the policy into `dir`; the log will be written there too.
    pub fn prepare(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let policy = dir.join("audit-policy.json");
        let group = format!("system:serviceaccounts:{}", crate::identity::NAMESPACE);
        // JSON is YAML. Only the benchmark's own identities are logged, once per request.
        let text = serde_json::json!({
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
            "rules": [
                {"level": "Metadata", "userGroups": [group]},
                {"level": "None"},
            ],
        });
        std::fs::write(&policy, format!("{text:#}\n"))?;
        let log = dir.join("audit.log");
        let _ = std::fs::remove_file(&log);
        Ok(Self { policy, log })
    }

    /// The kube-apiserver flags that turn it on.
    pub fn apiserver_args(&self) -> Vec<String> {
        vec![
            format!("--audit-policy-file={}", self.policy.display()),
            format!("--audit-log-path={}", self.log.display()),
            "--audit-log-mode=blocking".into(),
            "--audit-log-maxsize=0".into(),
        ]
    }

    /// Every request of `user` received from `from` (inclusive) to `to` (exclusive).
    pub fn requests(
        &self,
        user: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> anyhow::Result<Vec<Audited>> {
        let text = std::fs::read_to_string(&self.log)
            .with_context(|| format!("read the audit log {}", self.log.display()))?;
        Ok(text
            .lines()
            .filter_map(parse)
            .filter(|a| a.user == user && a.at >= from && a.at < to)
            .collect())
    }

    /// Whether `user` sent a request labelled `label` (`watch nodes`) at or after `from`.
    pub fn sent_since(&self, user: &str, label: &str, from: SystemTime) -> anyhow::Result<bool> {
        let until = SystemTime::now() + std::time::Duration::from_secs(3600);
        Ok(self
            .requests(user, from, until)?
            .iter()
            .any(|a| a.kind.label() == label))
    }
}

/// How many requests of each label.
pub fn breakdown(requests: &[Audited]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for request in requests {
        *counts.entry(request.kind.label()).or_default() += 1;
    }
    counts
}

fn parse(line: &str) -> Option<Audited> {
    let event: serde_json::Value = serde_json::from_str(line).ok()?;
    if event["stage"] != "RequestReceived" {
        return None;
    }
    let at: Timestamp = event["requestReceivedTimestamp"].as_str()?.parse().ok()?;
    let object = &event["objectRef"];
    let resource = match (object["resource"].as_str(), object["subresource"].as_str()) {
        (Some(r), Some(s)) => format!("{r}/{s}"),
        (Some(r), None) => r.to_owned(),
        _ => event["requestURI"].as_str().unwrap_or_default().to_owned(),
    };
    Some(Audited {
        at: SystemTime::from(at),
        user: event["user"]["username"].as_str()?.to_owned(),
        kind: RequestKind {
            verb: event["verb"].as_str()?.to_owned(),
            resource,
            name: object["name"].as_str().map(str::to_owned),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::{breakdown, parse};

    #[test]
    fn an_audit_event_is_read() {
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"x","stage":"RequestReceived","requestURI":"/api/v1/nodes/n1","verb":"patch","user":{"username":"system:serviceaccount:bench:agent","groups":[]},"objectRef":{"resource":"nodes","name":"n1","apiVersion":"v1"},"requestReceivedTimestamp":"2025-01-02T03:04:05.123456Z","stageTimestamp":"2025-01-02T03:04:05.123456Z"}"#;
        let audited = parse(line).expect("parsed");
        assert_eq!(audited.user, "system:serviceaccount:bench:agent");
        assert_eq!(audited.kind.label(), "patch nodes");
        assert_eq!(audited.kind.name.as_deref(), Some("n1"));
        assert!(parse(&line.replace("RequestReceived", "ResponseComplete")).is_none());
        let status =
            parse(&line.replace(r#""name":"n1""#, r#""name":"n1","subresource":"status""#))
                .expect("parsed");
        assert_eq!(status.kind.label(), "patch nodes/status");
        let counts = breakdown(&[audited.clone(), audited, status]);
        assert_eq!(counts.get("patch nodes"), Some(&2));
        assert_eq!(counts.get("patch nodes/status"), Some(&1));
    }
}
