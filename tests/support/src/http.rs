//! A small blocking HTTPS client for talking to our server directly, byte for
//! byte: the bad-input tests need to send what no well-behaved client would.
//!
//! One request per connection (`Connection: close`); chunked responses are
//! decoded.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::{io_err, Error};

/// What came back.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The body as JSON; `Value::Null` when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// An HTTPS client for one server.
#[derive(Debug, Clone)]
pub struct HttpClient {
    port: u16,
    server_name: ServerName<'static>,
    config: Arc<rustls::ClientConfig>,
}

impl HttpClient {
    /// The port on 127.0.0.1 it talks to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Trusts `ca` and presents `client` (certificate, key) if given.
    pub fn new(
        port: u16,
        ca: &Path,
        server_name: &str,
        client: Option<(&Path, &Path)>,
    ) -> Result<Self, Error> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).map_err(|e| Error::Pki(e.to_string()))? {
            roots
                .add(cert.map_err(|e| Error::Pki(e.to_string()))?)
                .map_err(|e| Error::Pki(e.to_string()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Pki(e.to_string()))?
            .with_root_certificates(roots);
        let config = match client {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|c| c.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| Error::Pki(e.to_string()))?;
                let key =
                    PrivateKeyDer::from_pem_file(key).map_err(|e| Error::Pki(e.to_string()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| Error::Pki(e.to_string()))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Self {
            port,
            server_name: ServerName::try_from(server_name.to_owned())
                .map_err(|e| Error::Pki(e.to_string()))?,
            config: Arc::new(config),
        })
    }

    /// Sends one request and reads the whole response (give watches a
    /// `timeoutSeconds`).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<HttpResponse, Error> {
        let context = || format!("{method} {path}");
        let tcp =
            TcpStream::connect(("127.0.0.1", self.port)).map_err(io_err(Path::new(&context())))?;
        tcp.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(io_err(Path::new(&context())))?;
        let conn = rustls::ClientConnection::new(self.config.clone(), self.server_name.clone())
            .map_err(|e| Error::Pki(e.to_string()))?;
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.port,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let write = tls
            .write_all(head.as_bytes())
            .and_then(|()| tls.write_all(body));
        // The server may answer (413) and close before reading a huge body.
        let write_failed = write.is_err();
        let mut raw = Vec::new();
        match tls.read_to_end(&mut raw) {
            Ok(_) => {}
            // A peer that closes without close_notify is fine for us.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
            Err(e) if write_failed || !raw.is_empty() => {
                let _ = e;
            }
            Err(e) => return Err(io_err(Path::new(&context()))(e)),
        }
        parse_response(&raw).ok_or_else(|| Error::Io {
            context: context(),
            source: std::io::Error::other(format!(
                "malformed HTTP response: {:?}",
                String::from_utf8_lossy(&raw[..raw.len().min(200)])
            )),
        })
    }
}

fn parse_response(raw: &[u8]) -> Option<HttpResponse> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Some(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let Ok(size) = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
        else {
            return out;
        };
        data = &data[line_end + 2..];
        if size == 0 || data.len() < size {
            out.extend_from_slice(&data[..size.min(data.len())]);
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = data.get(size + 2..).unwrap_or_default();
    }
}
