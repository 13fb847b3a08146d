//! Starting etcd for a control plane: the one etcd a control plane runs as
//! its component `etcd` (an [`EtcdCluster`](crate::EtcdCluster) is started
//! by `boot` instead), and what every etcd this crate starts shares: its
//! flags, its data directory and its health check.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{etcd_cluster, free_port, sanitize, ControlPlane, Error};

impl ControlPlane {
    pub(crate) fn start_etcd(&mut self) -> Result<(), Error> {
        let _ = std::fs::remove_dir_all(&self.etcd_data);
        let data = self.etcd_data.clone();
        let client = std::cell::Cell::new(0u16);
        let etcd = self.bins.etcd.clone();
        self.start_component(
            "etcd",
            &etcd,
            || {
                let c = free_port()?;
                let p = free_port()?;
                client.set(c);
                Ok(etcd_args(&data, c, p))
            },
            &[],
            Duration::from_secs(30),
            || etcd_healthy(client.get()),
        )?;
        self.etcd_url = format!("http://127.0.0.1:{}", client.get());
        Ok(())
    }
}

pub(crate) fn etcd_args(data: &Path, client: u16, peer: u16) -> Vec<String> {
    let only = format!("testenv=http://127.0.0.1:{peer}");
    etcd_cluster::member_args("testenv", data, client, peer, &only)
}

/// etcd's data dir: on tmpfs when there is one, since etcd fsyncs every write.
pub(crate) fn etcd_data_dir(run: &Path) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let name = run
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".to_owned());
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if shm.is_dir() {
        shm.join(format!(
            "sta-testenv-{}-{}-{n}",
            sanitize(&name),
            std::process::id()
        ))
    } else {
        run.join("etcd-data")
    }
}

pub(crate) fn etcd_healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}
