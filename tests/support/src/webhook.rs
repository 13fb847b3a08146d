//! An admission webhook for tests: an HTTPS server on a free 127.0.0.1 port,
//! with a CA of its own, that answers each AdmissionReview as a closure
//! says ([`Reply`]) and records every request it got.
//!
//! Synchronous: std threads and rustls, one thread per connection (kept
//! alive between requests, as a webhook client expects). Dropping the
//! server stops and joins every thread, sleeping replies included.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{json, Value};

use crate::Error;

/// How often blocked threads look at the stop flag.
const POLL: Duration = Duration::from_millis(20);
/// The largest request the server reads.
const MAX_REQUEST: usize = 16 * 1024 * 1024;

/// What the webhook answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `allowed: true`.
    Allow,
    /// `allowed: false` with a Status of this code and message.
    Deny { code: u16, message: String },
    /// `allowed: true` with this JSON patch (an array of operations).
    Patch(Value),
    /// `allowed: true` with these warnings.
    Warn(Vec<String>),
    /// This `response` object, over `{uid, allowed: true}`: for audit
    /// annotations, a wrong uid, a patch without its type, ….
    Response(Value),
    /// Waits, then answers.
    Sleep(Duration, Box<Reply>),
    /// A raw HTTP answer: any status, content type and body.
    Raw {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// A 200 with a body of `bytes` bytes and no length, written until the
    /// client hangs up (`u64::MAX`: endless).
    Flood { bytes: u64 },
}

impl Reply {
    pub fn allow() -> Self {
        Reply::Allow
    }

    pub fn deny(code: u16, message: &str) -> Self {
        Reply::Deny {
            code,
            message: message.to_owned(),
        }
    }

    pub fn patch(operations: Value) -> Self {
        Reply::Patch(operations)
    }

    pub fn warn(warnings: &[&str]) -> Self {
        Reply::Warn(warnings.iter().map(|w| (*w).to_owned()).collect())
    }

    pub fn sleep(duration: Duration, then: Reply) -> Self {
        Reply::Sleep(duration, Box::new(then))
    }
}

type Behaviour = dyn Fn(&Value) -> Reply + Send + Sync;

/// A running test webhook; stopped on drop.
pub struct WebhookServer {
    port: u16,
    ca_pem: String,
    requests: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookServer")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl WebhookServer {
    /// Starts a webhook whose certificate is valid for `127.0.0.1` and
    /// `localhost`; `behaviour` gets each AdmissionReview's `request`.
    pub fn start(
        behaviour: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    ) -> Result<Self, Error> {
        Self::start_with_names(&[], behaviour)
    }

    /// As [`WebhookServer::start`], the certificate also valid for `names`
    /// (e.g. `svc.ns.svc`, to stand for a Service).
    pub fn start_with_names(
        names: &[&str],
        behaviour: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    ) -> Result<Self, Error> {
        let (ca_pem, tls) = certificates(names)?;
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io("binding the webhook"))?;
        let port = listener.local_addr().map_err(io("webhook address"))?.port();
        listener
            .set_nonblocking(true)
            .map_err(io("webhook listener"))?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Shared {
            tls: Arc::new(tls),
            behaviour: Arc::new(behaviour),
            requests: requests.clone(),
            stop: stop.clone(),
        };
        let acceptor = std::thread::Builder::new()
            .name(format!("webhook-{port}"))
            .spawn(move || accept(listener, shared))
            .map_err(io("starting the webhook"))?;
        Ok(Self {
            port,
            ca_pem,
            requests,
            stop,
            acceptor: Some(acceptor),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The CA that signed the serving certificate, for `caBundle`.
    pub fn ca_bundle_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Every AdmissionReview `request` received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.requests).clone()
    }
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

#[derive(Clone)]
struct Shared {
    tls: Arc<rustls::ServerConfig>,
    behaviour: Arc<Behaviour>,
    requests: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn io(context: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |source| Error::Io {
        context: context.to_owned(),
        source,
    }
}

fn pki(e: impl std::fmt::Display) -> Error {
    Error::Pki(format!("webhook certificates: {e}"))
}

/// A fresh CA (PEM) and a serving configuration signed by it.
fn certificates(names: &[&str]) -> Result<(String, rustls::ServerConfig), Error> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(pki)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // A name of its own, so that another server's CA is no candidate issuer.
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("test-webhook-ca-{}-{serial}", std::process::id()),
    );
    let ca_key = KeyPair::generate().map_err(pki)?;
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(pki)?;

    let mut sans = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    sans.extend(names.iter().map(|n| (*n).to_owned()));
    let mut params = CertificateParams::new(sans).map_err(pki)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test-webhook");
    let key = KeyPair::generate().map_err(pki)?;
    let cert = params.signed_by(&key, &*ca).map_err(pki)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(pki)?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .map_err(pki)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((ca.pem(), config))
}

fn accept(listener: TcpListener, shared: Shared) {
    let mut connections: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let shared = shared.clone();
                if let Ok(handle) = std::thread::Builder::new()
                    .name("webhook-conn".to_owned())
                    .spawn(move || serve(stream, &shared))
                {
                    connections.push(handle);
                }
                connections.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => std::thread::sleep(POLL),
        }
    }
    for handle in connections {
        let _ = handle.join();
    }
}

type Tls = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// One connection: requests until the client hangs up or the server stops.
fn serve(stream: TcpStream, shared: &Shared) {
    if stream.set_nonblocking(false).is_err()
        || stream.set_read_timeout(Some(POLL)).is_err()
        || stream.set_write_timeout(Some(POLL)).is_err()
    {
        return;
    }
    let Ok(conn) = rustls::ServerConnection::new(shared.tls.clone()) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, stream);
    let mut buffer = Vec::new();
    while let Some(body) = read_request(&mut tls, &mut buffer, &shared.stop) {
        let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let request = review.get("request").cloned().unwrap_or(Value::Null);
        lock(&shared.requests).push(request.clone());
        let reply = (shared.behaviour)(&request);
        if !answer(&mut tls, &review, reply, &shared.stop) {
            return;
        }
    }
}

/// Reads one request and returns its body; `None` when the connection or
/// the server is done.
fn read_request(tls: &mut Tls, buffer: &mut Vec<u8>, stop: &AtomicBool) -> Option<Vec<u8>> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if length > MAX_REQUEST {
                return None;
            }
            let total = end + 4 + length;
            if buffer.len() >= total {
                let body = buffer[end + 4..total].to_vec();
                buffer.drain(..total);
                return Some(body);
            }
        }
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        match tls.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(e) if is_timeout(&e) => {}
            Err(_) => return None,
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Writes all of `data`, giving up when the server stops.
fn write_all(tls: &mut Tls, mut data: &[u8], stop: &AtomicBool) -> bool {
    while !data.is_empty() {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        match tls.write(data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(e) if is_timeout(&e) => {}
            Err(_) => return false,
        }
    }
    loop {
        match tls.flush() {
            Ok(()) => return true,
            Err(e) if is_timeout(&e) && !stop.load(Ordering::SeqCst) => {}
            Err(_) => return false,
        }
    }
}

/// Answers `review` as `reply` says; false when the connection is done.
fn answer(tls: &mut Tls, review: &Value, reply: Reply, stop: &AtomicBool) -> bool {
    let uid = review
        .pointer("/request/uid")
        .cloned()
        .unwrap_or(Value::Null);
    let api_version = review
        .get("apiVersion")
        .cloned()
        .unwrap_or_else(|| json!("admission.k8s.io/v1"));
    let mut response = json!({"uid": uid, "allowed": true});
    match reply {
        Reply::Allow => {}
        Reply::Deny { code, message } => {
            response["allowed"] = json!(false);
            response["status"] = json!({"code": code, "message": message, "status": "Failure"});
        }
        Reply::Patch(operations) => {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(crate::base64(operations.to_string().as_bytes()));
        }
        Reply::Warn(warnings) => response["warnings"] = json!(warnings),
        Reply::Response(fields) => {
            if let (Some(target), Some(fields)) = (response.as_object_mut(), fields.as_object()) {
                for (k, v) in fields {
                    target.insert(k.clone(), v.clone());
                }
            }
        }
        Reply::Sleep(duration, then) => {
            let deadline = Instant::now() + duration;
            while Instant::now() < deadline {
                if stop.load(Ordering::SeqCst) {
                    return false;
                }
                std::thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
            }
            return answer(tls, review, *then, stop);
        }
        Reply::Raw {
            status,
            content_type,
            body,
        } => {
            let head = format!(
                "HTTP/1.1 {status} Whatever\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            return write_all(tls, head.as_bytes(), stop) && write_all(tls, &body, stop);
        }
        Reply::Flood { bytes } => {
            let head =
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
            if !write_all(tls, head.as_bytes(), stop) {
                return false;
            }
            let chunk = [b' '; 64 * 1024];
            let mut left = bytes;
            while left > 0 {
                let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
                if !write_all(tls, &chunk[..n], stop) {
                    return false;
                }
                left -= n as u64;
            }
            tls.conn.send_close_notify();
            let _ = tls.flush();
            return false;
        }
    }
    let body = json!({"apiVersion": api_version, "kind": "AdmissionReview", "response": response})
        .to_string();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    write_all(tls, head.as_bytes(), stop) && write_all(tls, body.as_bytes(), stop)
}
