//! A TCP load balancer on loopback, standing in for a Service's endpoints in
//! front of several server replicas: each new connection goes to the next
//! backend that accepts it, round robin. A backend that refuses is skipped,
//! as kube-proxy skips an endpoint that is not ready; a connection to a
//! backend that dies is simply cut, as it would be in a cluster.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A running balancer; dropping it stops accepting (open connections end
/// when either side closes).
#[derive(Debug)]
pub struct Balancer {
    port: u16,
    backends: Arc<Mutex<Vec<u16>>>,
    /// Connections forwarded so far, per backend port.
    forwarded: Arc<Mutex<HashMap<u16, usize>>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Balancer {
    /// Listens on a free loopback port and forwards to `backends` (ports on
    /// 127.0.0.1).
    pub fn start(backends: Vec<u16>) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicUsize::new(0));
        let backends = Arc::new(Mutex::new(backends));
        let forwarded = Arc::new(Mutex::new(HashMap::new()));
        let accept = {
            let (stop, backends, forwarded) = (stop.clone(), backends.clone(), forwarded.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            let start = next.fetch_add(1, Ordering::Relaxed);
                            let ports = lock(&backends).clone();
                            let forwarded = forwarded.clone();
                            std::thread::spawn(move || forward(client, &ports, start, &forwarded));
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Ok(Self {
            port,
            backends,
            forwarded,
            stop,
            accept: Some(accept),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Replaces the backends; open connections stay where they are.
    pub fn set_backends(&self, ports: Vec<u16>) {
        *lock(&self.backends) = ports;
    }

    /// How many connections went to `port` so far.
    pub fn forwarded_to(&self, port: u16) -> usize {
        lock(&self.forwarded).get(&port).copied().unwrap_or(0)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// Connects `client` to the first backend, from `start` round robin, that
/// accepts, and copies both ways until either side closes.
fn forward(
    client: TcpStream,
    backends: &[u16],
    start: usize,
    forwarded: &Mutex<HashMap<u16, usize>>,
) {
    let _ = client.set_nonblocking(false);
    let backend = (0..backends.len()).find_map(|i| {
        let port = backends[(start + i) % backends.len()];
        let stream = TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(1),
        )
        .ok()?;
        *lock(forwarded).entry(port).or_insert(0) += 1;
        Some(stream)
    });
    let Some(backend) = backend else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = backend.set_nodelay(true);
    let (Ok(client2), Ok(backend2)) = (client.try_clone(), backend.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || copy(client, backend));
    copy(backend2, client2);
    let _ = up.join();
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
