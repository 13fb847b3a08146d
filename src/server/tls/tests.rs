#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use super::*;

/// A fresh self-signed certificate and key, as PEM.
fn pair(name: &str) -> (String, String) {
    let certified = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
    (certified.cert.pem(), certified.signing_key.serialize_pem())
}

struct Files {
    dir: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Files {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sta-tls-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            dir,
        }
    }

    fn write(&self, (cert, key): &(String, String)) {
        std::fs::write(&self.cert, cert).unwrap();
        std::fs::write(&self.key, key).unwrap();
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn leaf_of(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

fn served(reloader: &CertificateReloader) -> CertificateDer<'static> {
    reloader.certificate().current().cert[0].clone()
}

fn reloader(files: &Files) -> CertificateReloader {
    CertificateReloader::start(&files.cert, &files.key, Duration::from_secs(10))
        .unwrap()
        .0
}

#[test]
fn unchanged_files_are_not_reloaded() {
    let files = Files::new("unchanged");
    files.write(&pair("a.example"));
    let mut reloader = reloader(&files);
    assert_eq!(reloader.poll(), ReloadOutcome::Unchanged);
}

#[test]
fn a_changed_pair_is_picked_up() {
    let files = Files::new("changed");
    let first = pair("a.example");
    files.write(&first);
    let mut reloader = reloader(&files);
    assert_eq!(served(&reloader), leaf_of(&first.0));

    let second = pair("b.example");
    files.write(&second);
    let outcome = reloader.poll();
    let ReloadOutcome::Reloaded { sha256 } = outcome else {
        panic!("expected a reload, got {outcome:?}");
    };
    assert_eq!(served(&reloader), leaf_of(&second.0));
    let expected = Identity::from_files(&files.cert, &files.key)
        .unwrap()
        .fingerprint();
    assert_eq!(sha256, expected);
    assert_eq!(reloader.poll(), ReloadOutcome::Unchanged);
}

#[test]
fn a_key_that_does_not_match_the_certificate_is_refused_and_the_old_pair_kept() {
    let files = Files::new("mismatch");
    let first = pair("a.example");
    files.write(&first);
    let mut reloader = reloader(&files);

    let (other_cert, _) = pair("b.example");
    std::fs::write(&files.cert, &other_cert).unwrap();
    let outcome = reloader.poll();
    assert!(
        matches!(outcome, ReloadOutcome::Refused { .. }),
        "{outcome:?}"
    );
    assert_eq!(served(&reloader), leaf_of(&first.0));
    // Reported once, not at every poll.
    assert_eq!(reloader.poll(), ReloadOutcome::Unchanged);
}

#[test]
fn a_half_written_certificate_is_ignored_until_it_is_complete() {
    let files = Files::new("half");
    let first = pair("a.example");
    files.write(&first);
    let mut reloader = reloader(&files);

    let second = pair("b.example");
    std::fs::write(&files.cert, &second.0[..second.0.len() / 2]).unwrap();
    std::fs::write(&files.key, &second.1).unwrap();
    let outcome = reloader.poll();
    assert!(
        matches!(outcome, ReloadOutcome::Refused { .. }),
        "{outcome:?}"
    );
    assert_eq!(served(&reloader), leaf_of(&first.0));

    std::fs::write(&files.cert, &second.0).unwrap();
    assert!(matches!(reloader.poll(), ReloadOutcome::Reloaded { .. }));
    assert_eq!(served(&reloader), leaf_of(&second.0));
}

#[test]
fn a_missing_file_keeps_the_old_pair_and_its_return_is_picked_up() {
    let files = Files::new("missing");
    let first = pair("a.example");
    files.write(&first);
    let mut reloader = reloader(&files);

    std::fs::remove_file(&files.key).unwrap();
    assert!(matches!(reloader.poll(), ReloadOutcome::Refused { .. }));
    assert_eq!(reloader.poll(), ReloadOutcome::Unchanged);
    assert_eq!(served(&reloader), leaf_of(&first.0));

    let second = pair("b.example");
    files.write(&second);
    assert!(matches!(reloader.poll(), ReloadOutcome::Reloaded { .. }));
    assert_eq!(served(&reloader), leaf_of(&second.0));
}

#[tokio::test(start_paused = true)]
async fn the_reload_task_ends_when_the_server_stops() {
    let files = Files::new("stop");
    files.write(&pair("a.example"));
    let stop = Arc::new(Notify::new());
    let task = tokio::spawn(reloader(&files).run(stop.clone()));
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert!(!task.is_finished());
    stop.notify_waiters();
    tokio::time::timeout(Duration::from_secs(1), task)
        .await
        .unwrap()
        .unwrap();
}
