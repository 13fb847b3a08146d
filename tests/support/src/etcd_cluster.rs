//! A multi-member etcd cluster on loopback, for the tests of etcd's own
//! failures (issue 19): its members can be killed, paused and started again
//! on their data, and the member the others follow can be found.
//!
//! Owns the members' processes, ports and data directories, nothing else.
//! Every member's pid and data directory is given to a [`Watchdog`], so
//! nothing outlives the test binary, however it ends.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::process::{Process, Watchdog};
use crate::start::etcd::{etcd_data_dir, etcd_healthy};
use crate::{etcd_binary, free_port, io_err, wait_ready, Error};

/// How long a member, or the whole cluster, may take to become healthy.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One member: its ports and data survive a kill, so it can start again as
/// the same member.
#[derive(Debug)]
struct Member {
    name: String,
    client: u16,
    peer: u16,
    data: PathBuf,
    log: PathBuf,
    process: Option<Process>,
    /// Stopped with SIGSTOP: running, but answering nothing.
    paused: bool,
}

/// An etcd cluster of several members; stopped and its data removed on drop.
#[derive(Debug)]
pub struct EtcdCluster {
    bin: PathBuf,
    members: Vec<Member>,
    initial_cluster: String,
    dog: Watchdog,
}

impl EtcdCluster {
    /// Starts `size` members on free ports and waits until every one is
    /// healthy (which etcd answers only once the cluster has a leader).
    /// Logs go to `<dir>/etcd-<i>.log`.
    pub fn start(dir: &Path, size: usize) -> Result<Self, Error> {
        let bin = etcd_binary()?;
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let mut attempt = 1;
        loop {
            match Self::start_once(&bin, dir, size) {
                Ok(cluster) => return Ok(cluster),
                // A port taken between our pick and etcd's bind: pick again.
                Err((_, true)) if attempt < 3 => attempt += 1,
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// One attempt; on failure, whether a member lost a race for its port.
    fn start_once(bin: &Path, dir: &Path, size: usize) -> Result<Self, (Error, bool)> {
        let fail = |e: Error| (e, false);
        let mut members = Vec::with_capacity(size);
        for i in 0..size {
            members.push(Member {
                name: format!("member-{i}"),
                client: free_port().map_err(fail)?,
                peer: free_port().map_err(fail)?,
                data: etcd_data_dir(&dir.join(format!("etcd-{i}"))),
                log: dir.join(format!("etcd-{i}.log")),
                process: None,
                paused: false,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            bin: bin.to_owned(),
            members,
            initial_cluster,
            dog: Watchdog::start().map_err(fail)?,
        };
        for i in 0..size {
            let _ = std::fs::remove_dir_all(&cluster.members[i].data);
            let data = cluster.members[i].data.clone();
            cluster.dog.guard_path(&data);
            cluster.spawn(i).map_err(fail)?;
        }
        for i in 0..size {
            let client = cluster.members[i].client;
            let Some(p) = cluster.members[i].process.as_mut() else {
                continue;
            };
            if let Err(e) = wait_ready(p, &format!("etcd member {i}"), START_TIMEOUT, &mut || {
                etcd_healthy(client)
            }) {
                let raced = cluster
                    .members
                    .iter()
                    .filter_map(|m| m.process.as_ref())
                    .any(Process::lost_port_race);
                return Err((e, raced));
            }
        }
        Ok(cluster)
    }

    /// Starts member `i` on its ports and data (new or kept).
    fn spawn(&mut self, i: usize) -> Result<(), Error> {
        let m = &self.members[i];
        let args = member_args(&m.name, &m.data, m.client, m.peer, &self.initial_cluster);
        crate::process::rotate_log(&m.log)?;
        let p = Process::spawn(&format!("etcd-{i}"), &self.bin, &args, &m.log, &[])?;
        self.dog.guard_pid(p.pid);
        self.members[i].process = Some(p);
        Ok(())
    }

    /// How many members the cluster has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Every member's client URL, comma-separated, for `--etcd-servers`.
    pub fn urls(&self) -> String {
        (0..self.size())
            .map(|i| self.url(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `i`'s client URL.
    pub fn url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client)
    }

    /// Member `i`'s log.
    pub fn log(&self, i: usize) -> &Path {
        &self.members[i].log
    }

    /// The member every running member that is not paused names as its
    /// leader, if they agree.
    pub fn leader(&self) -> Option<usize> {
        let (mut named, mut found) = (None, None);
        for (i, m) in self.members.iter().enumerate() {
            if m.process.is_none() || m.paused {
                continue;
            }
            let status = status(m.client)?;
            let leader = id(&status["leader"])?;
            if named.is_some_and(|n| n != leader) {
                return None;
            }
            named = Some(leader);
            if id(&status["header"]["member_id"]) == Some(leader) {
                found = Some(i);
            }
        }
        found
    }

    /// Waits until the running members agree on a leader, and returns it.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader() {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: "the etcd members to agree on a leader".to_owned(),
                    timeout,
                    log: self.members[0].log.clone(),
                    tail: crate::process::log_tail(&self.members[0].log, 30),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL of member `i`: no goodbye to its peers. Its data stays.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.members[i].process.take() {
            p.kill();
            self.dog.forget_pid(p.pid);
        }
    }

    /// Starts the killed member `i` again on its data, and waits until it
    /// is healthy (it has caught up with a leader).
    pub fn restart(&mut self, i: usize) -> Result<(), Error> {
        self.kill(i);
        self.spawn(i)?;
        let client = self.members[i].client;
        match self.members[i].process.as_mut() {
            Some(p) => wait_ready(p, &format!("etcd member {i}"), START_TIMEOUT, &mut || {
                etcd_healthy(client)
            }),
            None => Ok(()),
        }
    }

    /// SIGSTOP (`pause`) or SIGCONT of member `i`: a member that is there
    /// but does not answer, as a stalled disk or a long GC pause looks.
    pub fn pause(&mut self, i: usize, pause: bool) {
        self.members[i].paused = pause;
        if let Some(p) = &self.members[i].process {
            let signal = if pause {
                Signal::SIGSTOP
            } else {
                Signal::SIGCONT
            };
            let _ = kill(Pid::from_raw(p.pid as i32), signal);
        }
    }
}

impl EtcdCluster {
    /// Every key under `prefix` with its value, read (linearizably) through
    /// the first running member that answers.
    pub fn range(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, Error> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let body = serde_json::json!({
            "key": b64.encode(prefix),
            "range_end": b64.encode(prefix_end(prefix)),
        })
        .to_string();
        let decode = |v: &Value| v.as_str().and_then(|s| b64.decode(s).ok());
        for m in self.members.iter().filter(|m| m.process.is_some()) {
            let Some(answer) = post(m.client, "/v3/kv/range", &body) else {
                continue;
            };
            // No `kvs` at all when nothing matches.
            let kvs = answer["kvs"].as_array().cloned().unwrap_or_default();
            return Ok(kvs
                .iter()
                .filter_map(|kv| {
                    let key = String::from_utf8(decode(&kv["key"])?).ok()?;
                    Some((key, decode(&kv["value"]).unwrap_or_default()))
                })
                .collect());
        }
        Err(Error::Io {
            context: format!("reading {prefix} from etcd"),
            source: std::io::Error::other("no running member answered"),
        })
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            // A paused member would not hear SIGTERM.
            self.pause(i, false);
            if let Some(mut p) = self.members[i].process.take() {
                p.stop(Duration::from_secs(2));
            }
            let _ = std::fs::remove_dir_all(&self.members[i].data);
        }
    }
}

/// The flags of one member of a cluster whose members are `initial_cluster`.
pub(crate) fn member_args(
    name: &str,
    data: &Path,
    client: u16,
    peer: u16,
    initial_cluster: &str,
) -> Vec<String> {
    vec![
        format!("--name={name}"),
        format!("--data-dir={}", data.display()),
        format!("--listen-client-urls=http://127.0.0.1:{client}"),
        format!("--advertise-client-urls=http://127.0.0.1:{client}"),
        format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
        format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
        format!("--initial-cluster={initial_cluster}"),
        "--initial-cluster-state=new".to_owned(),
        "--log-level=warn".to_owned(),
    ]
}

/// A member's `Maintenance.Status`.
fn status(port: u16) -> Option<Value> {
    post(port, "/v3/maintenance/status", "{}")
}

/// One call of etcd's JSON gateway on the member at `port`; `None` unless
/// it answers 200 with JSON.
fn post(port: u16, path: &str, body: &str) -> Option<Value> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let req = format!(
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let (head, json) = response.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    serde_json::from_str(json).ok()
}

/// The first key after every key that starts with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A member id, which the gateway writes as a decimal string.
fn id(v: &Value) -> Option<u64> {
    v.as_str()?.parse().ok().filter(|id| *id != 0)
}
