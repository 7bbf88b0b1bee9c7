//! `--notify-url` in shoutrrr's forms, end to end: a real rollout told to every service, each
//! reaching a receiver on loopback that keeps every request whole (method, path and query,
//! headers, body), and each must get the exact request its API expects. Services whose URL
//! names their host are pointed at the receiver; the others (and the https ones) are reached
//! as behind an egress proxy: `ALL_PROXY` names a `CONNECT` proxy on loopback that shows a
//! certificate in the service's name from the test CA (`SSL_CERT_FILE`). E-mail goes to a real SMTP
//! server, Mailpit, and is read back from its API.

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
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{
    self,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
};

/// One request as it arrived.
#[derive(Debug, Clone)]
struct Seen {
    /// The `CONNECT` authority it came through (`host:port`), or "" when it came straight.
    tunnel: String,
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
    /// A plain http receiver, or with `tls` a `CONNECT` proxy that answers each tunnel itself,
    /// over TLS.
    async fn start(tls: Option<TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                match tls.clone() {
                    None => drop(tokio::spawn(serve(stream, String::new(), kept))),
                    Some(tls) => drop(tokio::spawn(tunnel(stream, tls, kept))),
                }
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

/// Reads a `CONNECT` request, answers it, then serves the tunnel's requests over TLS.
async fn tunnel(mut stream: TcpStream, tls: TlsAcceptor, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let Some(authority) = head
        .strip_prefix("CONNECT ")
        .and_then(|r| r.split(' ').next())
    else {
        panic!("the proxy was asked something else than a tunnel: {head}");
    };
    let authority = authority.to_owned();
    let answered = stream
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await;
    if answered.is_err() {
        return;
    }
    if let Ok(stream) = tls.accept(stream).await {
        serve(stream, authority, seen).await;
    }
}

/// Serves one connection's requests: each read whole (headers, then Content-Length bytes).
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    tunnel: String,
    seen: Arc<Mutex<Vec<Seen>>>,
) {
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
            tunnel: tunnel.clone(),
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

async fn read_more<S: AsyncRead + Unpin>(stream: &mut S, buffer: &mut Vec<u8>) -> bool {
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
    let receiver = Receiver::start(None).await;
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

/// A TLS acceptor showing one certificate, from the control plane's CA, for every name.
fn acceptor(sb: &nodesim::sandbox::Sandbox, names: &[&str]) -> TlsAcceptor {
    let (cert, key) = sb
        .control_plane
        .server_certificate(names)
        .expect("a certificate");
    let cert = CertificateDer::from_pem_slice(cert.as_bytes()).expect("a PEM certificate");
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("a PEM key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("a server configuration");
    TlsAcceptor::from(Arc::new(config))
}

/// Asserts one request's tunnel, method, path and query, and headers.
fn assert_request(seen: &Seen, tunnel: &str, target: &str, headers: &[(&str, &str)]) {
    assert_eq!(
        (
            seen.tunnel.as_str(),
            seen.method.as_str(),
            seen.target.as_str()
        ),
        (tunnel, "POST", target),
        "{seen:?}"
    );
    for (name, value) in headers {
        assert_eq!(seen.header(name), Some(*value), "{name}: {seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_service_behind_an_https_proxy_gets_the_request_its_api_expects() {
    let urls = [
        "discord://t0ken@12345?title=Reboots&username=kured",
        "telegram://110201543:AAHdqTcv@telegram?chats=@ops",
        "pushover://shoutrrr:t0ken@us3r?devices=phone&title=Reboots",
        "slack://hook:T0001-B0002-XXXX3@webhook?channel=%23ops&username=kured",
        "teams://g1@t2/a3/o4?host=acme.webhook.office.com&title=Reboots&color=FF0000",
        "mattermost://bot@chat.example/t0ken/ops",
        "rocketchat://bot@rc.example/tokA/tokB/ops",
        "googlechat://chat.googleapis.com/v1/spaces/FOO/messages?key=k3y&token=t0k",
        "zulip://bot%40example.org:k3y@zulip.example?stream=ops&topic=Reboots",
        "opsgenie://api.opsgenie.com/k3y?alias=reboots",
    ];
    let hosts = [
        "discord.com",
        "api.telegram.org",
        "api.pushover.net",
        "hooks.slack.com",
        "acme.webhook.office.com",
        "chat.example",
        "rc.example",
        "chat.googleapis.com",
        "zulip.example",
        "api.opsgenie.com",
    ];
    let config = SandboxConfig::with_nodes(1)
        .reboot_duration(Duration::from_secs(1))
        .start_controller(false);
    let mut sb = e2e::sandbox_without_pods(config).await;
    let proxy = Receiver::start(Some(acceptor(&sb, &hosts))).await;
    let ca = sb.control_plane.dir().join("notify-ca.pem");
    std::fs::write(&ca, sb.control_plane.ca_pem()).expect("write the CA");
    let mut args: Vec<String> = urls.iter().map(|u| format!("--notify-url={u}")).collect();
    args.push("--message-template-uncordon=Back: {node}".to_owned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = [
        // ALL_PROXY, which the notifications honour as HTTPS_PROXY: the API client refuses
        // HTTPS_PROXY with a kubeconfig (as the sandbox's controller has; in a pod, its
        // in-cluster configuration ignores it).
        ("ALL_PROXY", format!("http://{}", proxy.address)),
        ("NO_PROXY", "127.0.0.1,localhost".to_owned()),
        ("SSL_CERT_FILE", ca.display().to_string()),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .to_vec();
    sb.start_controller_with_env(&args, env)
        .expect("the controller starts");
    e2e::every_node::request(&sb.control_plane);
    let watch = BudgetWatch::start(sb.client.clone(), 1).await;
    rollout_completes(&sb, &watch).await;
    let nodes = kube::Api::<Node>::all(sb.client.clone())
        .list(&Default::default())
        .await
        .expect("nodes");
    let node = nodes.items[0].metadata.name.clone().unwrap_or_default();
    let text = format!("Back: {node}");
    let json_type = ("content-type", "application/json");
    let form_type = ("content-type", "application/x-www-form-urlencoded");

    let discord = proxy.told("/api/webhooks/", &text).await;
    assert_request(
        &discord,
        "discord.com:443",
        "/api/webhooks/12345/t0ken",
        &[json_type],
    );
    assert_eq!(
        discord.json(),
        json!({"embeds": [{"description": text, "color": 0x50d9ff, "title": "Reboots"}], "username": "kured"})
    );

    let telegram = proxy.told("/bot", &text).await;
    assert_request(
        &telegram,
        "api.telegram.org:443",
        "/bot110201543:AAHdqTcv/sendMessage",
        &[json_type],
    );
    assert_eq!(
        telegram.json(),
        json!({"chat_id": "@ops", "text": text, "disable_notification": false, "disable_web_page_preview": false})
    );

    // A form carries the text percent-encoded.
    let encoded = format!("Back%3A%20{node}");
    let pushover = proxy.told("/1/messages.json", &encoded).await;
    assert_request(
        &pushover,
        "api.pushover.net:443",
        "/1/messages.json",
        &[form_type],
    );
    assert_eq!(
        pushover.body,
        format!(
            "device=phone&user=us3r&token=t0ken&message=Back%3A%20{node}&title=Reboots&priority=0"
        )
    );

    let slack = proxy.told("/services/", &text).await;
    assert_request(
        &slack,
        "hooks.slack.com:443",
        "/services/T0001/B0002/XXXX3",
        &[json_type],
    );
    assert_eq!(
        slack.json(),
        json!({"text": text, "username": "kured", "channel": "#ops"})
    );

    let teams = proxy.told("/webhookb2/", &text).await;
    assert_request(
        &teams,
        "acme.webhook.office.com:443",
        "/webhookb2/g1@t2/IncomingWebhook/a3/o4",
        &[json_type],
    );
    assert_eq!(
        teams.json(),
        json!({
            "@type": "MessageCard",
            "@context": "http://schema.org/extensions",
            "summary": "Reboots",
            "title": "Reboots",
            "themeColor": "FF0000",
            "text": text,
        })
    );

    let mattermost = proxy.told("/hooks/t0ken", &text).await;
    assert_request(
        &mattermost,
        "chat.example:443",
        "/hooks/t0ken",
        &[json_type],
    );
    assert_eq!(
        mattermost.json(),
        json!({"text": text, "username": "bot", "channel": "ops"})
    );

    let rocketchat = proxy.told("/hooks/tokA", &text).await;
    assert_request(
        &rocketchat,
        "rc.example:443",
        "/hooks/tokA/tokB",
        &[json_type],
    );
    assert_eq!(
        rocketchat.json(),
        json!({"text": text, "username": "bot", "channel": "#ops"})
    );

    let google = proxy.told("/v1/spaces/", &text).await;
    assert_request(
        &google,
        "chat.googleapis.com:443",
        "/v1/spaces/FOO/messages?key=k3y&token=t0k",
        &[json_type],
    );
    assert_eq!(google.json(), json!({"text": text}));

    let zulip = proxy.told("/api/v1/messages", &encoded).await;
    // base64 of bot@example.org:k3y
    let auth = ("authorization", "Basic Ym90QGV4YW1wbGUub3JnOmszeQ==");
    assert_request(
        &zulip,
        "zulip.example:443",
        "/api/v1/messages",
        &[form_type, auth],
    );
    assert_eq!(
        zulip.body,
        format!("type=stream&to=ops&content=Back%3A%20{node}&topic=Reboots")
    );

    let opsgenie = proxy.told("/v2/alerts", &text).await;
    let auth = ("authorization", "GenieKey k3y");
    assert_request(
        &opsgenie,
        "api.opsgenie.com:443",
        "/v2/alerts",
        &[json_type, auth],
    );
    assert_eq!(
        opsgenie.json(),
        json!({"message": text, "alias": "reboots"})
    );
    sb.stop().await;
}

/// A free port on loopback, for a server the test starts.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

/// `GET path` on Mailpit's API, as JSON (its body read whole, chunked or not).
async fn mailpit(api: SocketAddr, path: &str) -> Option<Value> {
    let mut stream = TcpStream::connect(api).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, mut body) = response.split_once("\r\n\r\n")?;
    let mut whole = String::new();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        while let Some((size, rest)) = body.split_once("\r\n") {
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            if size == 0 {
                break;
            }
            whole.push_str(rest.get(..size)?);
            body = rest.get(size + 2..)?;
        }
    } else {
        whole.push_str(body);
    }
    serde_json::from_str(&whole).ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_email_reaches_a_real_smtp_server_logged_in_with_its_sender_recipients_and_subject() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Mailpit takes only this login: a mail sent without it, or with another, is refused.
    let logins = dir.path().join("logins");
    std::fs::write(&logins, "bob:s3cret\n").expect("write the logins");
    let (smtp, api) = (free_port(), free_port());
    let api = SocketAddr::from(([127, 0, 0, 1], api));
    let _mailpit = tokio::process::Command::new(testenv::bin_dir().join("mailpit"))
        .arg(format!("--smtp=127.0.0.1:{smtp}"))
        .arg(format!("--listen={api}"))
        .arg(format!(
            "--database={}",
            dir.path().join("mail.db").display()
        ))
        .arg(format!("--smtp-auth-file={}", logins.display()))
        .args([
            "--smtp-auth-allow-insecure",
            "--disable-version-check",
            "--quiet",
        ])
        .kill_on_drop(true)
        .spawn()
        .expect("mailpit runs (testenv/hack/build.sh builds it)");
    let url = format!(
        "smtp://bob:s3cret@127.0.0.1:{smtp}/?from=kured@example.org&fromname=Kured\
         &to=ops@example.org,oncall@example.org&subject=Reboots&auth=Plain"
    );
    let config = SandboxConfig::with_nodes(1)
        .reboot_duration(Duration::from_secs(1))
        .controller_args([
            format!("--notify-url={url}"),
            "--message-template-uncordon=Back: {node}".to_owned(),
        ]);
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
    let id = e2e::eventually(
        "Mailpit holds the mail that the node is back",
        Duration::from_secs(60),
        None,
        || async {
            let list = mailpit(api, "/api/v1/messages").await?;
            list["messages"]
                .as_array()?
                .iter()
                .find(|m| m["Snippet"].as_str().is_some_and(|s| s.contains(&text)))
                .and_then(|m| m["ID"].as_str().map(str::to_owned))
        },
    )
    .await;
    let mail = mailpit(api, &format!("/api/v1/message/{id}"))
        .await
        .expect("the message");
    assert_eq!(
        mail["From"],
        json!({"Name": "Kured", "Address": "kured@example.org"})
    );
    let to: Vec<&str> = mail["To"]
        .as_array()
        .expect("recipients")
        .iter()
        .filter_map(|r| r["Address"].as_str())
        .collect();
    assert_eq!(to, ["ops@example.org", "oncall@example.org"]);
    assert_eq!(mail["Subject"], "Reboots");
    assert_eq!(mail["Text"].as_str().map(str::trim), Some(text.as_str()));
    sb.stop().await;
}
