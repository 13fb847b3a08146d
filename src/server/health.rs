//! `/healthz`, `/livez` and `/readyz`, in kube-apiserver's format.
//!
//! Each endpoint runs a list of named checks. `?verbose` lists them as
//! `[+]name ok` / `[-]name failed: reason`, `/readyz/<name>` runs one, and
//! `?exclude=<name>` skips one, as k8s.io/apiserver's healthz package does.
//! Readiness turns false as soon as shutdown begins, so that load balancers and
//! the aggregator stop sending new requests before connections are drained.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Response, StatusCode};
use http_body_util::{BodyExt, Full};

use crate::endpoints::Body;

type CheckFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

#[derive(Clone)]
struct Check {
    name: &'static str,
    run: CheckFn,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check").field("name", &self.name).finish()
    }
}

/// The health checks of one server process.
#[derive(Debug)]
pub struct Health {
    shutting_down: Arc<AtomicBool>,
    livez: Vec<Check>,
    readyz: Vec<Check>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    pub fn new() -> Self {
        let shutting_down = Arc::new(AtomicBool::new(false));
        let ping = Check {
            name: "ping",
            run: Arc::new(|| Ok(())),
        };
        let flag = shutting_down.clone();
        let shutdown = Check {
            name: "shutdown",
            run: Arc::new(move || {
                if flag.load(Ordering::Relaxed) {
                    Err("process is shutting down".to_owned())
                } else {
                    Ok(())
                }
            }),
        };
        Self {
            shutting_down,
            livez: vec![ping.clone()],
            readyz: vec![ping, shutdown],
        }
    }

    /// Adds a named readiness check, run on every `/readyz`.
    pub fn add_readyz(
        &mut self,
        name: &'static str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.readyz.push(Check {
            name,
            run: Arc::new(check),
        });
    }

    /// From now on `/readyz` fails with `[-]shutdown`.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// Answers `path` if it is a health path, else `None`.
    pub fn serve(&self, path: &str, query: Option<&str>) -> Option<Response<Body>> {
        let path = path.trim_end_matches('/');
        let (endpoint, rest) = match path.split_once('/').map(|(_, p)| p) {
            Some(p) => match p.split_once('/') {
                Some((e, r)) => (e, Some(r)),
                None => (p, None),
            },
            None => return None,
        };
        let checks = match endpoint {
            "healthz" | "livez" => &self.livez,
            "readyz" => &self.readyz,
            _ => return None,
        };
        Some(run_checks(endpoint, checks, rest, query))
    }
}

fn run_checks(
    endpoint: &str,
    checks: &[Check],
    only: Option<&str>,
    query: Option<&str>,
) -> Response<Body> {
    let mut verbose = false;
    let mut excluded: Vec<String> = Vec::new();
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "verbose" => verbose = v != "false",
            "exclude" => excluded.push(v.to_owned()),
            _ => {}
        }
    }
    if let Some(name) = only {
        return match checks.iter().find(|c| c.name == name) {
            Some(check) => match (check.run)() {
                Ok(()) => text(StatusCode::OK, "ok".to_owned()),
                Err(reason) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("internal server error: {reason}\n"),
                ),
            },
            None => text(StatusCode::NOT_FOUND, "404 page not found\n".to_owned()),
        };
    }

    let mut report = String::new();
    let mut failed = false;
    for check in checks {
        if excluded.iter().any(|e| e == check.name) {
            report.push_str(&format!("[+]{} excluded: ok\n", check.name));
            continue;
        }
        match (check.run)() {
            Ok(()) => report.push_str(&format!("[+]{} ok\n", check.name)),
            Err(reason) => {
                failed = true;
                report.push_str(&format!("[-]{} failed: {reason}\n", check.name));
            }
        }
    }
    if failed {
        report.push_str(&format!("{endpoint} check failed\n"));
        text(StatusCode::INTERNAL_SERVER_ERROR, report)
    } else if verbose {
        report.push_str(&format!("{endpoint} check passed\n"));
        text(StatusCode::OK, report)
    } else {
        text(StatusCode::OK, "ok".to_owned())
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut().insert(
        "x-content-type-options",
        header::HeaderValue::from_static("nosniff"),
    );
    resp
}

#[cfg(test)]
mod tests;
