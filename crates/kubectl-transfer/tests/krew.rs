//! `kubectl transfer` as krew users get it: `hack/krew-package.sh` packs the
//! kubectl-transfer binary cargo built for these tests into this platform's
//! release archive and writes the plugin manifest from
//! `deploy/krew/transfer.yaml` with that archive's sha256; the real krew (the
//! release pinned in `hack/krew-version`, built by `hack/build-krew.sh`)
//! installs it from them into a private `KREW_ROOT`, and the pinned kubectl
//! finds the plugin there. krew must refuse an archive whose sha256 is not the
//! manifest's, and the template must carry what krew requires of a manifest.
//!
//! No control plane: nothing here talks to a cluster.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// The plugin's executable, as krew installs it and kubectl looks it up.
const PLUGIN: &str = "kubectl-transfer";
/// The release URL the manifest's archives are published under.
const RELEASES: &str =
    "https://github.com/storage-transfer/storage-transfer-apiserver/releases/download";
/// The platforms the manifest must offer at least.
const REQUIRED_PLATFORMS: &[(&str, &str)] = &[("linux", "amd64"), ("linux", "arm64")];

/// The repository: this crate is `crates/kubectl-transfer` in it.
fn repo() -> &'static Path {
    static REPO: OnceLock<PathBuf> = OnceLock::new();
    REPO.get_or_init(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// The plugin cargo built for these tests.
const PLUGIN_BIN: &str = env!("CARGO_BIN_EXE_kubectl-transfer");

fn version_tag() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// This machine's platform, as krew (Go's GOOS and GOARCH) names it.
fn platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    (std::env::consts::OS, arch)
}

fn archive_name(os: &str, arch: &str) -> String {
    format!("{PLUGIN}-{}-{os}-{arch}.tar.gz", version_tag())
}

/// A scratch directory under cargo's temporary directory for tests, removed
/// when the test ends, however it ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("krew-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs a command to its end, with no stdin.
fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn describe(out: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// krew, the pinned release, built once per test binary (at once when cached).
fn krew() -> &'static Path {
    static KREW: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = KREW.get_or_init(|| {
        let script = repo().join("hack/build-krew.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "hack/build-krew.sh failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    });
    match built {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    }
}

/// The pinned kubectl, as the other tests find it.
fn kubectl() -> &'static Path {
    static KUBECTL: OnceLock<PathBuf> = OnceLock::new();
    KUBECTL.get_or_init(|| {
        sta_testenv::Binaries::locate()
            .unwrap_or_else(|e| panic!("{e}"))
            .kubectl
    })
}

/// `hack/krew-package.sh` on the test's binary, for this platform, into `out`:
/// the manifest's path and the archive's.
fn package(out: &Path) -> (PathBuf, PathBuf) {
    let (os, arch) = platform();
    let result = run(Command::new("bash")
        .arg(repo().join("hack/krew-package.sh"))
        .arg("--bin")
        .arg(PLUGIN_BIN)
        .args(["--os", os, "--arch", arch])
        .arg("--out")
        .arg(out));
    assert!(
        result.status.success(),
        "hack/krew-package.sh failed: {}",
        describe(&result)
    );
    let manifest = out.join("transfer.yaml");
    assert_eq!(
        String::from_utf8_lossy(&result.stdout).trim(),
        manifest.to_string_lossy(),
        "hack/krew-package.sh --out prints the manifest's path"
    );
    let archive = out.join(archive_name(os, arch));
    assert!(archive.is_file(), "no archive {}", archive.display());
    assert!(manifest.is_file(), "no manifest {}", manifest.display());
    (manifest, archive)
}

/// `PATH` with `first` in front, as krew's setup instructions have it, and
/// without the directories that hold another kubectl-transfer (an installed
/// copy would shadow the one under test).
fn path_with(first: &Path) -> OsString {
    let current = std::env::var_os("PATH").unwrap_or_default();
    let rest = std::env::split_paths(&current).filter(|dir| !dir.join(PLUGIN).exists());
    std::env::join_paths(std::iter::once(first.to_path_buf()).chain(rest)).unwrap()
}

/// `krew install --manifest=… --archive=…` into the private krew root `root`.
fn krew_install(root: &Path, manifest: &Path, archive: &Path) -> Output {
    let mut manifest_flag = OsString::from("--manifest=");
    manifest_flag.push(manifest);
    let mut archive_flag = OsString::from("--archive=");
    archive_flag.push(archive);
    run(Command::new(krew())
        .arg("install")
        .arg(manifest_flag)
        .arg(archive_flag)
        .env("KREW_ROOT", root)
        .env("KREW_NO_UPGRADE_CHECK", "1")
        .env("PATH", path_with(&root.join("bin"))))
}

/// Whether two files hold the same bytes.
fn same_bytes(a: &Path, b: &Path) -> bool {
    let (fa, fb) = (File::open(a).unwrap(), File::open(b).unwrap());
    if fa.metadata().unwrap().len() != fb.metadata().unwrap().len() {
        return false;
    }
    let (mut ra, mut rb) = (BufReader::new(fa), BufReader::new(fb));
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = ra.read(&mut ba).unwrap();
        if n == 0 {
            return rb.read(&mut bb).unwrap() == 0;
        }
        if rb.read_exact(&mut bb[..n]).is_err() || ba[..n] != bb[..n] {
            return false;
        }
    }
}

#[test]
fn the_krew_manifest_installs_the_plugin_and_kubectl_finds_it() {
    let scratch = Scratch::new("install");
    let (manifest, archive) = package(&scratch.path("dist"));
    let root = scratch.path("krew-root");

    let installed = krew_install(&root, &manifest, &archive);
    assert!(
        installed.status.success(),
        "krew refused the manifest: {}",
        describe(&installed)
    );
    assert!(
        String::from_utf8_lossy(&installed.stderr).contains("Installed plugin: transfer"),
        "{}",
        describe(&installed)
    );

    let bin_dir = root.join("bin");
    let plugin = bin_dir.join(PLUGIN);
    assert!(plugin.is_file(), "krew put no {}", plugin.display());
    assert!(
        same_bytes(&plugin, Path::new(PLUGIN_BIN)),
        "{} is not the binary that was packaged",
        plugin.display()
    );

    let path = path_with(&bin_dir);
    let kubeconfig = scratch.path("no-kubeconfig");
    let listed = run(Command::new(kubectl())
        .args(["plugin", "list"])
        .env("PATH", &path)
        .env("KUBECONFIG", &kubeconfig));
    assert!(
        listed.status.success(),
        "kubectl plugin list: {}",
        describe(&listed)
    );
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        stdout.lines().any(|l| Path::new(l.trim()) == plugin),
        "kubectl plugin list does not name {}: {}",
        plugin.display(),
        describe(&listed)
    );

    let help = run(Command::new(kubectl())
        .args(["transfer", "--help"])
        .env("PATH", &path)
        .env("KUBECONFIG", &kubeconfig));
    assert!(
        help.status.success(),
        "kubectl transfer --help: {}",
        describe(&help)
    );
}

#[test]
fn krew_refuses_an_archive_whose_sha256_is_not_the_manifests() {
    let scratch = Scratch::new("bad-sha256");
    let (manifest, archive) = package(&scratch.path("dist"));
    let text = std::fs::read_to_string(&manifest).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("sha256: "))
        .unwrap()
        .to_owned();
    let sha = line
        .trim_start()
        .trim_start_matches("sha256: ")
        .trim_matches('"');
    assert_eq!(sha.len(), 64, "{line}");
    // Another well-formed sha256: each hex digit changed.
    let wrong: String = sha
        .chars()
        .map(|c| if c == 'a' { 'b' } else { 'a' })
        .collect();
    std::fs::write(&manifest, text.replace(sha, &wrong)).unwrap();

    let root = scratch.path("krew-root");
    let installed = krew_install(&root, &manifest, &archive);
    assert!(
        !installed.status.success(),
        "krew installed an archive with the wrong sha256: {}",
        describe(&installed)
    );
    assert!(
        String::from_utf8_lossy(&installed.stderr).contains("checksum does not match"),
        "{}",
        describe(&installed)
    );
    assert!(!root.join("bin").join(PLUGIN).exists());
}

fn field<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, key| {
        v.get(key)
            .unwrap_or_else(|| panic!("deploy/krew/transfer.yaml has no {path}"))
    })
}

fn text<'a>(v: &'a Value, path: &str) -> &'a str {
    let s = field(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string"));
    assert!(!s.trim().is_empty(), "{path} is empty");
    s
}

#[test]
fn the_krew_manifest_template_has_what_krew_requires_at_the_crates_version() {
    let path = repo().join("deploy/krew/transfer.yaml");
    let raw = std::fs::read_to_string(&path).unwrap();
    let m: Value = serde_saphyr::from_str(&raw).unwrap();
    let tag = version_tag();

    assert_eq!(
        text(&m, "apiVersion"),
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(text(&m, "kind"), "Plugin");
    // krew's index names a plugin's manifest after it.
    assert_eq!(text(&m, "metadata.name"), "transfer");
    assert_eq!(path.file_name().unwrap(), "transfer.yaml");
    assert_eq!(
        text(&m, "spec.version"),
        tag,
        "spec.version is not v + the version of Cargo.toml"
    );
    assert!(text(&m, "spec.homepage").starts_with("https://"));
    let short = text(&m, "spec.shortDescription");
    assert!(
        !short.contains('\n'),
        "krew wants shortDescription on one line"
    );
    let description = text(&m, "spec.description");
    for needle in ["NamespaceTransfer", "storage.transfer.k8s.io", "consent"] {
        assert!(description.contains(needle), "description: {description}");
    }
    assert!(text(&m, "spec.caveats").contains("storage-transfer-apiserver"));

    let platforms = field(&m, "spec.platforms").as_array().unwrap();
    assert!(!platforms.is_empty());
    let mut seen = Vec::new();
    for p in platforms {
        let labels = field(p, "selector.matchLabels").as_object().unwrap();
        let mut keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["arch", "os"],
            "the selector keys krew knows: os, arch"
        );
        let (os, arch) = (
            text(p, "selector.matchLabels.os"),
            text(p, "selector.matchLabels.arch"),
        );
        assert!(!seen.contains(&(os, arch)), "two platforms for {os}/{arch}");
        seen.push((os, arch));

        assert_eq!(
            text(p, "uri"),
            format!("{RELEASES}/{tag}/{}", archive_name(os, arch)),
            "the archive of {os}/{arch}"
        );
        let sha = text(p, "sha256");
        let placeholder = format!(
            "KUBECTL_TRANSFER_{}_{}_SHA256",
            os.to_uppercase(),
            arch.to_uppercase()
        );
        assert!(
            sha == placeholder
                || (sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))),
            "{os}/{arch}: sha256 is neither {placeholder} (filled in by hack/krew-package.sh) nor a sha256: {sha}"
        );
        assert_eq!(text(p, "bin"), PLUGIN);
        let files = field(p, "files").as_array().unwrap();
        assert!(!files.is_empty(), "krew wants files unset or non-empty");
        for f in files {
            // The archive holds the binary alone (hack/krew-package.sh).
            assert_eq!(text(f, "from"), PLUGIN);
            assert_eq!(text(f, "to"), ".");
        }
    }
    for (os, arch) in REQUIRED_PLATFORMS {
        assert!(seen.contains(&(*os, *arch)), "no platform for {os}/{arch}");
    }
}
