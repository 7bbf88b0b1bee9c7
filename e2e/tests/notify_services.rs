//! `--notify-url` in shoutrrr's forms, end to end: a real rollout told to services whose URL
//! names their host, each pointed at a receiver on loopback that keeps every request whole
//! (method, path and query, headers, body); each service must get the exact request its API
//! expects (ntfy, Gotify, generic with its options, Matrix).

use e2e::{BudgetWatch, rollout::rollout_completes, wait_until};
use k8s_openapi::api::core::v1::Node;
use nodesim::sandbox::SandboxConfig;
use serde_json::{Value, json};
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// One request as it arrived.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    /// The path and query.
    target: String,
    /// Names in lower case.
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} {}: not JSON ({e}): {}",
                self.method, self.target, self.body
            )
        })
    }
}

/// A server on loopback that answers every request `200 {}` and keeps it.
#[derive(Debug, Clone)]
struct Receiver {
    address: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Receiver {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, kept.clone()));
            }
        });
        Self { address, seen }
    }

    /// Waits until a request to a path starting with `path` has carried `text`, and returns it.
    async fn told(&self, path: &str, text: &str) -> Seen {
        let found = || {
            self.seen
                .lock()
                .expect("lock")
                .iter()
                .find(|s| s.target.starts_with(path) && s.body.contains(text))
                .cloned()
        };
        let what = format!("a request to {path} tells {text:?}");
        wait_until(&what, Duration::from_secs(60), None, || async {
            found().is_some()
        })
        .await;
        found().unwrap_or_else(|| panic!("{what}"))
    }
}

/// Serves one connection's requests: each read whole (headers, then Content-Length bytes).
async fn serve(mut stream: TcpStream, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut buffer = Vec::new();
    loop {
        let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
            if !read_more(&mut stream, &mut buffer).await {
                return;
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        let mut lines = head.lines();
        let mut start = lines.next().unwrap_or_default().split(' ');
        let (method, target) = (
            start.next().unwrap_or_default(),
            start.next().unwrap_or_default(),
        );
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        while buffer.len() < end + 4 + length {
            if !read_more(&mut stream, &mut buffer).await {
                return;
            }
        }
        let body = String::from_utf8_lossy(&buffer[end + 4..end + 4 + length]).into_owned();
        seen.lock().expect("lock").push(Seen {
            method: method.to_owned(),
            target: target.to_owned(),
            headers,
            body,
        });
        buffer.drain(..end + 4 + length);
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_service_named_by_its_host_gets_the_request_its_api_expects() {
    let receiver = Receiver::start().await;
    let at = receiver.address;
    let urls = [
        format!("ntfy://alice:pw@{at}/reboots?scheme=http&title=Reboots&priority=high&tags=node"),
        format!("gotify://{at}/gotify/AbCdEfGhIjKlMnO?disabletls=yes&title=Reboots&priority=5"),
        format!(
            "generic+http://{at}/generic?template=json&title=Reboots&messagekey=text\
             &@X-Api-Key=k3y&$team=ops&keep=1"
        ),
        format!("matrix://:t0ken@{at}?rooms=!abc:example&disabletls=yes"),
    ];
    let mut args: Vec<String> = urls.iter().map(|u| format!("--notify-url={u}")).collect();
    args.push("--message-template-uncordon=Back: {node}".to_owned());
    let config = SandboxConfig::with_nodes(1)
        .reboot_duration(Duration::from_secs(1))
        .controller_args(args);
    let sb = e2e::sandbox_without_pods(config).await;
    e2e::every_node::request(&sb.control_plane);
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    rollout_completes(&sb, &watch).await;
    let nodes = kube::Api::<Node>::all(sb.client.clone())
        .list(&Default::default())
        .await
        .expect("nodes");
    let node = nodes.items[0].metadata.name.clone().unwrap_or_default();
    let text = format!("Back: {node}");

    let ntfy = receiver.told("/reboots", &text).await;
    assert_eq!(
        (ntfy.method.as_str(), ntfy.target.as_str()),
        ("POST", "/reboots")
    );
    assert_eq!(ntfy.body, text);
    for (name, value) in [
        ("content-type", "text/plain; charset=utf-8"),
        ("title", "Reboots"),
        ("priority", "high"),
        ("tags", "node"),
        // base64 of alice:pw
        ("authorization", "Basic YWxpY2U6cHc="),
    ] {
        assert_eq!(ntfy.header(name), Some(value), "ntfy {name}: {ntfy:?}");
    }

    let gotify = receiver.told("/gotify/", &text).await;
    assert_eq!(
        (gotify.method.as_str(), gotify.target.as_str()),
        ("POST", "/gotify/message?token=AbCdEfGhIjKlMnO")
    );
    assert_eq!(gotify.header("content-type"), Some("application/json"));
    assert_eq!(
        gotify.json(),
        json!({"message": text, "title": "Reboots", "priority": 5})
    );

    let generic = receiver.told("/generic", &text).await;
    assert_eq!(
        (generic.method.as_str(), generic.target.as_str()),
        ("POST", "/generic?keep=1")
    );
    assert_eq!(generic.header("content-type"), Some("application/json"));
    assert_eq!(generic.header("x-api-key"), Some("k3y"));
    assert_eq!(
        generic.json(),
        json!({"title": "Reboots", "text": text, "team": "ops"})
    );

    let matrix = receiver.told("/_matrix/", &text).await;
    assert_eq!(
        (matrix.method.as_str(), matrix.target.as_str()),
        (
            "POST",
            "/_matrix/client/r0/rooms/%21abc%3Aexample/send/m.room.message?access_token=t0ken"
        )
    );
    assert_eq!(matrix.header("content-type"), Some("application/json"));
    assert_eq!(matrix.json(), json!({"msgtype": "m.text", "body": text}));
    sb.stop().await;
}
