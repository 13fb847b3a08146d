//! The null backend: an aggregated API server that does nothing, so that
//! `make bench` can measure the ceiling kube-apiserver's proxy alone allows.
//!
//! It serves `null.bench.k8s.io/v1`, one namespaced resource `nulls`, over
//! HTTPS (rustls, HTTP/2 and HTTP/1.1 as our server offers them) on its own
//! small tokio runtime inside the bench process, and it answers from bytes
//! serialized once at start: the same object for every get, the same list
//! (of 10 at full scale) for every list, and for every watch the events the
//! bench asks for through [`NullBackend::emit`], since nothing can be
//! written to it through the API. It serves discovery (`/apis`, `/apis/<group>`,
//! `/apis/<group>/v1`) enough for the aggregator to mark its APIService
//! Available, empty OpenAPI documents so that the aggregator does not retry
//! fetching them, and authenticates nothing: it is registered the way the test
//! environment registers our server (an ExternalName Service to
//! `localhost`, a serving certificate from the same serving CA, that CA as
//! the APIService's `caBundle`).
//!
//! It owns its listener, its runtime and its APIService; it must not touch
//! anything our server or the CRD twin serve.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{base64, pki::Usage, ControlPlane};
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::sync::broadcast;

/// The null backend's API group, version and resource.
pub const GROUP: &str = "null.bench.k8s.io";
pub const VERSION: &str = "v1";
pub const RESOURCE: &str = "nulls";
const KIND: &str = "Null";
/// Its APIService, and the Service (namespace, name) that APIService names.
const APISERVICE: &str = "v1.null.bench.k8s.io";
const SERVICE_NAMESPACE: &str = "null-bench";
const SERVICE_NAME: &str = "null-backend";

/// How many emitted events a slow watcher may fall behind before it skips
/// some; the bench emits one at a time and waits for every watcher.
const EVENT_BUFFER: usize = 64;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// What every request is answered from: bytes made once at start.
struct Fixed {
    apis: Bytes,
    group: Bytes,
    resources: Bytes,
    openapi_v2: Bytes,
    openapi_v3: Bytes,
    object: Bytes,
    list: Bytes,
    not_found: Bytes,
    /// Watch event `n`, a JSON line, for [`NullBackend::emit`].
    events: Vec<Bytes>,
}

impl Fixed {
    /// The fixed answers, every object a copy of `template` (an object as
    /// the backend under comparison returns it, so that both carry the same
    /// bytes) renamed: `c-000000` for a get, `n-<i>` in the list of
    /// `list_len`, `w-<n>` in watch event `n`, which is the name the bench's
    /// fan-out looks for.
    fn new(template: &serde_json::Value, list_len: usize, events: usize) -> Self {
        let group_version = format!("{GROUP}/{VERSION}");
        let named = |name: &str| {
            let mut object = template.clone();
            object["apiVersion"] = group_version.clone().into();
            object["kind"] = KIND.into();
            object["metadata"]["name"] = name.into();
            object
        };
        let json = |value: serde_json::Value| Bytes::from(serde_json::to_vec(&value).unwrap());
        let version = serde_json::json!({"groupVersion": group_version, "version": VERSION});
        let group = serde_json::json!({
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": GROUP,
            "versions": [version],
            "preferredVersion": version,
        });
        let mut group_in_list = group.clone();
        if let Some(g) = group_in_list.as_object_mut() {
            g.remove("kind");
            g.remove("apiVersion");
        }
        Self {
            apis: json(serde_json::json!({
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [group_in_list],
            })),
            group: json(group),
            resources: json(serde_json::json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": group_version,
                "resources": [{
                    "name": RESOURCE,
                    "singularName": "null",
                    "namespaced": true,
                    "kind": KIND,
                    "verbs": ["get", "list", "watch"],
                }],
            })),
            openapi_v2: json(serde_json::json!({
                "swagger": "2.0",
                "info": {"title": "null backend", "version": VERSION},
                "paths": {},
            })),
            openapi_v3: json(serde_json::json!({"paths": {}})),
            object: json(named("c-000000")),
            list: json(serde_json::json!({
                "apiVersion": group_version,
                "kind": format!("{KIND}List"),
                "metadata": {"resourceVersion": "1"},
                "items": (0..list_len).map(|i| named(&format!("n-{i}"))).collect::<Vec<_>>(),
            })),
            not_found: json(serde_json::json!({
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "NotFound",
                "code": 404,
            })),
            events: (0..events)
                .map(|n| {
                    let event =
                        serde_json::json!({"type": "ADDED", "object": named(&format!("w-{n}"))});
                    let mut line = serde_json::to_vec(&event).unwrap();
                    line.push(b'\n');
                    Bytes::from(line)
                })
                .collect(),
        }
    }
}

/// A running null backend, registered with the aggregator.
pub struct NullBackend {
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    fixed: Arc<Fixed>,
    events: broadcast::Sender<Bytes>,
    /// Its own runtime, so that the bench's load generator does not queue
    /// ahead of it; shut down in the background on drop.
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for NullBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NullBackend")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl NullBackend {
    /// Starts the backend on a free port, its objects copies of `template`,
    /// its list `list_len` of them (the bench's "list 10") and `events`
    /// watch events ready to emit, registers its APIService with `cp`'s
    /// aggregator and returns once the aggregator proxies a get to it.
    pub fn start(
        cp: &ControlPlane,
        template: &serde_json::Value,
        list_len: usize,
        events: usize,
    ) -> Self {
        let dns = format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc");
        let serving = cp
            .pki
            .serving_ca
            .issue(
                &cp.pki.dir,
                SERVICE_NAME,
                &dns,
                &[],
                &[&dns, "localhost", "127.0.0.1"],
                Usage::Server,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let tls = tls_config(&serving.cert, &serving.key);
        let fixed = Arc::new(Fixed::new(template, list_len, events));
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("null-backend")
            .enable_all()
            .build()
            .unwrap();
        // Bound here, served there: the caller may be inside a runtime of
        // its own, where this one cannot block.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        runtime.spawn(serve(listener, tls, fixed.clone(), events.clone()));
        let backend = Self {
            port,
            fixed,
            events,
            runtime: Some(runtime),
        };
        backend.register(cp);
        backend
    }

    /// Sends watch event `n` to every open watch now; returns how many
    /// watches it was sent to.
    pub fn emit(&self, n: usize) -> usize {
        self.events.send(self.fixed.events[n].clone()).unwrap_or(0)
    }

    /// The Service and APIService, pointed at our port with the serving CA;
    /// waits for `Available` and for the aggregator to proxy a get.
    fn register(&self, cp: &ControlPlane) {
        let ca = base64(cp.pki.serving_ca.pem().unwrap().as_bytes());
        let manifests = serde_json::json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": SERVICE_NAMESPACE},
                },
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": SERVICE_NAME, "namespace": SERVICE_NAMESPACE},
                    "spec": {"type": "ExternalName", "externalName": "localhost"},
                },
                {
                    "apiVersion": "apiregistration.k8s.io/v1",
                    "kind": "APIService",
                    "metadata": {"name": APISERVICE},
                    "spec": {
                        "group": GROUP,
                        "version": VERSION,
                        "groupPriorityMinimum": 1000,
                        "versionPriority": 15,
                        "caBundle": ca,
                        "service": {
                            "namespace": SERVICE_NAMESPACE,
                            "name": SERVICE_NAME,
                            "port": self.port,
                        },
                    },
                },
            ],
        });
        let admin = cp.kubectl();
        let run = admin.run_with_stdin(&["apply", "-f", "-"], Some(&manifests.to_string()));
        assert!(run.success, "registering the null backend: {}", run.stderr);
        admin.ok(&[
            "wait",
            "--for=condition=Available",
            &format!("apiservice/{APISERVICE}"),
            "--timeout=90s",
        ]);
        let get = format!("--raw=/apis/{GROUP}/{VERSION}/namespaces/default/{RESOURCE}/probe");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !admin.run(&["get", &get]).success {
            assert!(
                Instant::now() < deadline,
                "the aggregator never proxied a get to the null backend"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for NullBackend {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The backend's TLS: the serving certificate, no client certificate asked
/// for, and the protocols our server offers.
fn tls_config(cert: &std::path::Path, key: &std::path::Path) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    let chain = rustls::pki_types::CertificateDer::pem_file_iter(cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Accepts connections until the runtime shuts down, each served by hyper
/// with its default limits (those our server keeps too).
async fn serve(
    listener: std::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    fixed: Arc<Fixed>,
    events: broadcast::Sender<Bytes>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let http = auto::Builder::new(TokioExecutor::new());
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, http, fixed, events) = (
            acceptor.clone(),
            http.clone(),
            fixed.clone(),
            events.clone(),
        );
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = service_fn(move |req| {
                let (fixed, events) = (fixed.clone(), events.clone());
                async move { Ok::<_, Infallible>(answer(&req, &fixed, &events)) }
            });
            let _ = http.serve_connection(TokioIo::new(tls), service).await;
        });
    }
}

/// The fixed answer to `req`.
fn answer(
    req: &Request<Incoming>,
    fixed: &Fixed,
    events: &broadcast::Sender<Bytes>,
) -> Response<Body> {
    let path = req.uri().path().trim_end_matches('/');
    if req.method() != Method::GET {
        return json(StatusCode::METHOD_NOT_ALLOWED, fixed.not_found.clone());
    }
    match path {
        "/healthz" | "/readyz" | "/livez" => {
            return full(StatusCode::OK, "text/plain", Bytes::from_static(b"ok"))
        }
        "/apis" => return json(StatusCode::OK, fixed.apis.clone()),
        "/openapi/v2" => return json(StatusCode::OK, fixed.openapi_v2.clone()),
        "/openapi/v3" => return json(StatusCode::OK, fixed.openapi_v3.clone()),
        _ => {}
    }
    let Some(rest) = path
        .strip_prefix("/apis/")
        .and_then(|p| p.strip_prefix(GROUP))
    else {
        return json(StatusCode::NOT_FOUND, fixed.not_found.clone());
    };
    let segments: Vec<&str> = rest.split('/').skip(1).collect();
    match segments.as_slice() {
        [] => json(StatusCode::OK, fixed.group.clone()),
        [VERSION] => json(StatusCode::OK, fixed.resources.clone()),
        [VERSION, "namespaces", _, RESOURCE] if is_watch(req) => watch(events.subscribe()),
        [VERSION, "namespaces", _, RESOURCE] => json(StatusCode::OK, fixed.list.clone()),
        [VERSION, "namespaces", _, RESOURCE, _] => json(StatusCode::OK, fixed.object.clone()),
        _ => json(StatusCode::NOT_FOUND, fixed.not_found.clone()),
    }
}

fn is_watch(req: &Request<Incoming>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

/// A watch: headers at once, then every emitted event as it comes.
fn watch(receiver: broadcast::Receiver<Bytes>) -> Response<Body> {
    let lines = futures::stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(line) => return Some((Ok::<_, Infallible>(Frame::data(line)), receiver)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(lines)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    response
}

fn json(status: StatusCode, body: Bytes) -> Response<Body> {
    full(status, "application/json", body)
}

fn full(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed_unsync(Full::new(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
