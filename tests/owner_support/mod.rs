//! Owners as real processes for the outage and clock tests: `cronsole run` with its metrics
//! endpoint, logs on stderr (kept whole for assertions), optionally under libfaketime; plus
//! what those tests read back — `/healthz`, `/metrics`, history rows, the marks the jobs'
//! commands leave — and a small tmpfs the file-store outage tests fill and free.
//!
//! Owns: test scaffolding. Must not touch: the code under test except through the binary.
#![allow(unsafe_code)] // signals, forks and polls real processes through libc
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::support;

/// A `cronsole run` owner: killed on drop if still running.
pub struct Owner {
    pub child: Child,
    pub metrics: SocketAddr,
    pub name: String,
    log: Arc<Mutex<Vec<String>>>,
}

/// How an owner process is started.
#[derive(Clone, Default)]
pub struct OwnerSpec {
    /// `--store` value (a directory or a PostgreSQL URL).
    pub store: String,
    /// The jobs file, applied at start (`--jobs`); `None`: run what the store holds.
    pub jobs: Option<PathBuf>,
    /// Extra environment (libfaketime's variables, `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// Extra arguments after `run`.
    pub args: Vec<String>,
}

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address")
}

impl Owner {
    pub fn start(name: &str, dir: &Path, spec: &OwnerSpec) -> Owner {
        let metrics = free_addr();
        let mut cmd = support::cli::cronsole(dir);
        cmd.arg("run")
            .arg("--store")
            .arg(&spec.store)
            .arg("--metrics-addr")
            .arg(metrics.to_string())
            .arg("--log-to")
            .arg("stderr")
            .args(&spec.args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(j) = &spec.jobs {
            cmd.arg("--jobs").arg(j);
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start cronsole run");
        let log = Arc::new(Mutex::new(Vec::new()));
        if let Some(err) = child.stderr.take() {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for l in BufReader::new(err).lines().map_while(Result::ok) {
                    log.lock().unwrap_or_else(|e| e.into_inner()).push(l);
                }
            });
        }
        let o = Owner {
            child,
            metrics,
            name: name.to_string(),
            log,
        };
        o.wait_for("its metrics endpoint", Duration::from_secs(60), |o| {
            o.get("/healthz").is_some()
        });
        o
    }

    /// Its stderr so far (logs and notices).
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `GET path` on its metrics endpoint: (status code, body), `None` when it does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.metrics, path)
    }

    /// Poll `f` every 100 ms until it holds; panics after `limit` with the owner's log tail.
    pub fn wait_for(&self, what: &str, limit: Duration, f: impl Fn(&Owner) -> bool) {
        if !support::wait::poll_until(limit, || f(self)) {
            let log = self.log();
            let tail = &log[log.len().saturating_sub(40)..];
            panic!(
                "{}: timed out after {limit:?} waiting for {what}; log tail:\n{}",
                self.name,
                tail.join("\n")
            );
        }
    }

    /// SIGTERM, then wait (60 s at most) for the exit code.
    pub fn stop(mut self) -> i32 {
        // SAFETY: kill on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let mut code = None;
        support::wait::wait_until(
            format!("{} to stop after SIGTERM", self.name),
            Duration::from_secs(60),
            || {
                code = self
                    .child
                    .try_wait()
                    .ok()
                    .flatten()
                    .map(|st| st.code().unwrap_or(-1));
                code.is_some()
            },
        );
        code.unwrap_or(-1)
    }

    /// The value of the first sample of `metric` (its name and labels as printed).
    pub fn metric(&self, metric: &str) -> Option<f64> {
        let (code, body) = self.get("/metrics")?;
        if code != 200 {
            return None;
        }
        metric_value(&body, metric)
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first sample named exactly `metric` (with its labels, if given) in an exposition.
pub fn metric_value(body: &str, metric: &str) -> Option<f64> {
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, v) = l.rsplit_once(' ')?;
        (name == metric).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A one-request HTTP/1.1 GET with short timeouts.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    Some((code, body.to_string()))
}

/// Every history row of `store`, oldest first, as JSON values.
pub fn history(dir: &Path, store: &str) -> Vec<serde_json::Value> {
    let (code, out, err) =
        support::cli::run_with_store(dir, store, &["history", "--json", "--limit", "100000"]);
    assert_eq!(code, 0, "history: {err}");
    let mut rows: Vec<serde_json::Value> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    rows.reverse();
    rows
}

/// A row's RFC 3339 field as an instant.
pub fn at(row: &serde_json::Value, field: &str) -> Option<DateTime<Utc>> {
    row[field]
        .as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.to_utc())
}

/// A shell command for a job that leaves one mark per execution in `marks` (outside the store)
/// and prints it, so the run's row carries it: `sleep` seconds of work in between.
pub fn marking_command(marks: &Path, tag: &str, sleep: f64) -> String {
    format!(
        "m={tag}-$(cat /proc/sys/kernel/random/uuid); echo $m >> {}; sleep {sleep}; echo $m",
        marks.display()
    )
}

/// The marks left in `marks` (one per execution).
pub fn marks(marks: &Path) -> Vec<String> {
    std::fs::read_to_string(marks)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Every execution (mark) recorded by exactly one row whose result carries it, and no run_id
/// in two rows: the list of problems (empty when all holds). Marks of runs still in flight at
/// the end (`in_flight_ok`) may lack their row.
pub fn recorded_once(marks: &[String], rows: &[serde_json::Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut ids = std::collections::BTreeMap::new();
    for r in rows {
        if let Some(id) = r["run_id"].as_str() {
            *ids.entry(id.to_string()).or_insert(0) += 1;
        }
    }
    for (id, n) in &ids {
        if *n > 1 {
            problems.push(format!("run {id} has {n} rows"));
        }
    }
    for m in marks {
        let n = rows
            .iter()
            .filter(|r| r["result"].as_str().is_some_and(|x| x.contains(m.as_str())))
            .count();
        if n != 1 {
            problems.push(format!("execution {m} is in {n} rows"));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for m in marks {
        if !seen.insert(m) {
            problems.push(format!("mark {m} twice"));
        }
    }
    problems
}

/// A tmpfs of `size` bytes mounted at `dir` for one test (unmounted on drop), which the test
/// fills and frees to make the store's disk full. `None` when this process cannot mount.
pub struct SmallDisk {
    pub dir: PathBuf,
    filler: PathBuf,
}

impl SmallDisk {
    pub fn mount(dir: &Path, size: u64) -> Result<SmallDisk, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed (tests that fill a disk need root with CAP_SYS_ADMIN): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(SmallDisk {
            dir: dir.to_path_buf(),
            filler: dir.join("filler"),
        })
    }

    /// Write zeros until the disk is full (`ENOSPC`); returns the bytes written.
    pub fn fill(&self) -> u64 {
        let mut f = std::fs::File::create(&self.filler).expect("create filler");
        let chunk = vec![0u8; 64 * 1024];
        let mut n = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(k) => n += k as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        // Single bytes: whatever a short write left.
        while let Ok(1) = f.write(&[0u8]) {
            n += 1;
        }
        n
    }

    pub fn free(&self) {
        std::fs::remove_file(&self.filler).expect("free the disk");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Where libfaketime's library is, if installed (the Debian `libfaketime` package's path for
/// this architecture first).
pub fn libfaketime() -> Option<PathBuf> {
    let arch = std::env::consts::ARCH;
    let gnu = match arch {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => other,
    };
    [
        format!("/usr/lib/{gnu}/faketime/libfaketime.so.1"),
        "/usr/lib/faketime/libfaketime.so.1".to_string(),
        "/usr/local/lib/faketime/libfaketime.so.1".to_string(),
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// libfaketime or a skip (a failure under `CI=true`).
pub fn libfaketime_or_skip() -> Option<PathBuf> {
    let p = libfaketime();
    if p.is_none() {
        support::skip(
            "libfaketime",
            "libfaketime.so.1 not found (Debian package libfaketime)",
        );
    }
    p
}

/// The environment that runs an owner with its wall clock `offset` from the real one (a
/// libfaketime spec such as `-40`, `+5m`), its monotonic clock left real.
pub fn skewed(lib: &Path, offset: &str) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), lib.display().to_string()),
        ("FAKETIME".into(), offset.into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}

/// The environment that runs an owner whose wall clock follows the libfaketime spec written in
/// `file` (re-read every second), its monotonic clock left real: a test steps the clock by
/// rewriting the file.
pub fn steppable(lib: &Path, file: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), lib.display().to_string()),
        ("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()),
        ("FAKETIME_CACHE_DURATION".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}
