//! The recorder against a stand-in for kubectl: a script that answers its
//! watch, prints one object per run, ends its first two runs with an ERROR
//! event, and then holds its stream open until it is killed.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::*;

/// A directory of its own, removed when the test is over.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sta-watch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// A kubectl whose `n`th run prints `a-n`, and an ERROR event for n < 3.
    fn kubectl(&self) -> Kubectl {
        let count = self.0.join("count");
        let script = self.0.join("kubectl");
        std::fs::write(
            &script,
            format!(
                r#"#!/bin/sh
n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}
echo 'I1206 round_trippers.go:632] "Response" verb="GET" url="https://127.0.0.1/apis?watch=true" status="200 OK"' >&2
printf '{{"type":"ADDED","object":{{"metadata":{{"name":"a-%s","namespace":"ns"}}}}}}\n' $n
if [ $n -lt 3 ]; then
  printf '{{"type":"ERROR","object":{{"kind":"Status","code":410}}}}\n'
  exec sleep 600
fi
exec sleep 600
"#,
                count = count.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        Kubectl::new(&script, &self.0.join("kubeconfig"), &self.0.join("cache"))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn a_watch_started_again_after_each_error_keeps_every_event_and_counts_the_restarts() {
    let scratch = Scratch::new("again");
    let watch = Recording::start(&scratch.kubectl(), &["things", "-A"], Ends::StartAgain);
    watch.wait_started(WAIT).unwrap();
    let third = watch.next("a-3", WAIT, |e| e.name() == "a-3").unwrap();
    assert_eq!(third.kind, "ADDED");
    assert_eq!(third.namespace(), "ns");
    let (events, restarts) = watch.finish();
    let seen: Vec<(&str, &str)> = events.iter().map(|e| (e.kind.as_str(), e.name())).collect();
    assert_eq!(
        seen,
        [
            ("ADDED", "a-1"),
            ("ERROR", ""),
            ("ADDED", "a-2"),
            ("ERROR", ""),
            ("ADDED", "a-3"),
        ]
    );
    assert_eq!(restarts, 2);
    assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
}

#[test]
fn a_watch_of_one_thing_ends_with_its_stream_and_says_so() {
    let scratch = Scratch::new("once");
    let watch = Recording::start(&scratch.kubectl(), &["things"], Ends::Once);
    watch.wait_started(WAIT).unwrap();
    let first = watch.next("a-1", WAIT, |e| e.kind == "ADDED").unwrap();
    assert_eq!(first.name(), "a-1");
    let err = watch.next("a-2", WAIT, |e| e.name() == "a-2").unwrap_err();
    assert!(err.contains("the watch ended before it was a-2"), "{err}");
    assert!(err.contains("watch=true"), "it shows kubectl's log: {err}");
    assert_eq!(watch.restarts(), 0);
    assert_eq!(watch.events().len(), 2);
}

#[test]
fn a_watch_that_never_answers_is_reported_with_what_kubectl_said() {
    let scratch = Scratch::new("silent");
    let script = scratch.0.join("kubectl");
    std::fs::write(
        &script,
        "#!/bin/sh\necho 'error: the server is gone' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let k = Kubectl::new(
        &script,
        &scratch.0.join("kubeconfig"),
        &scratch.0.join("cache"),
    );
    let watch = Recording::start(&k, &["things"], Ends::Once);
    let err = watch.wait_started(WAIT).unwrap_err();
    assert!(err.contains("the server is gone"), "{err}");
}
