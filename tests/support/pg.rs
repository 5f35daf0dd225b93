//! Throwaway PostgreSQL clusters for the PostgreSQL store's tests.
//!
//! Owns: starting/stopping/restarting a private cluster and handing out one fresh database per
//! test, so tests run in parallel without seeing each other's rows. Must not touch: the code
//! under test (tests talk to it through `PgStore` like any owner would).
//!
//! Order of preference for [`database`]:
//! 1. `CRONSOLE_TEST_PG_URL` (set by `.ci/run`, which starts one cluster for the whole run);
//! 2. a cluster this test process starts itself with `initdb`/`pg_ctl` (one per process, stopped
//!    by a watchdog when the process exits), so plain `cargo test` exercises PostgreSQL too;
//! 3. otherwise the test is reported skipped (a `SKIPPED TEST …` line that `.ci/run` counts, see
//!    `cronsole::testkit::skip`) and returns — except under `CI=true`, where a missing database
//!    is a failure.
//!
//! PostgreSQL refuses to run as root: when we are root, `initdb`/`pg_ctl` run as the `postgres`
//! user through `runuser`, on a data directory owned by that user.
#![allow(unsafe_code)] // signals, forks and polls real processes through libc
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use cronsole::testkit::skip::skip;

/// Where the PostgreSQL server binaries are, if anywhere.
pub fn bin_dir() -> Option<PathBuf> {
    let mut candidates = vec![PathBuf::from("/usr/local/bin")];
    if let Ok(rd) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut v: Vec<PathBuf> = rd.flatten().map(|e| e.path().join("bin")).collect();
        v.sort();
        v.reverse();
        candidates.extend(v);
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    candidates
        .into_iter()
        .find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Run a PostgreSQL tool, as the `postgres` user when we are root.
fn pg_tool(bin: &Path, args: &[&str]) -> Result<String, String> {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    let out = cmd
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {:?} failed ({}): {}{}",
            bin.display(),
            args,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// A private cluster on 127.0.0.1 with trust auth, stopped and deleted on drop.
pub struct Cluster {
    pub base: PathBuf,
    pub data: PathBuf,
    pub port: u16,
    pub url: String,
    bin: PathBuf,
    keep: bool,
    /// Extra `postgres` options (`-c ssl=on …`) for every start.
    extra: String,
    /// Keep the server's durability defaults (fsync, synchronous_commit, full_page_writes on);
    /// test clusters turn them off for speed.
    durable: bool,
}

impl Cluster {
    pub fn start() -> Result<Cluster, String> {
        Cluster::start_with(false)
    }

    /// A cluster with PostgreSQL's durability defaults (for benchmarks of durable commits).
    pub fn start_durable() -> Result<Cluster, String> {
        Cluster::start_with(true)
    }

    /// A durable cluster with extra server options (` -c name=value …`), started with them.
    pub fn start_durable_with(extra: &str) -> Result<Cluster, String> {
        let mut c = Cluster::start_with(true)?;
        c.extra = extra.to_string();
        c.pg_ctl("restart")?;
        Ok(c)
    }

    fn start_with(durable: bool) -> Result<Cluster, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        let bin = bin_dir().ok_or("initdb/pg_ctl not found")?;
        let base = std::env::temp_dir().join(format!(
            "cronsole-pg-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&base).map_err(|e| format!("creating {}: {e}", base.display()))?;
        if is_root() {
            let st = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(&base)
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !st.success() {
                return Err(format!("chown postgres {} failed", base.display()));
            }
        }
        let data = base.join("data");
        let data_s = data.to_string_lossy().into_owned();
        pg_tool(
            &bin.join("initdb"),
            &[
                "-D",
                &data_s,
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        let port = free_port()?;
        let c = Cluster {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            base,
            data,
            port,
            bin,
            keep: false,
            extra: String::new(),
            durable,
        };
        c.pg_ctl("start")?;
        Ok(c)
    }

    /// A cluster with `ssl=on` whose `pg_hba.conf` accepts only `hostssl` over TCP with a
    /// password (SCRAM) for user `postgres`, password `password`. The server certificate (for
    /// DNS name `localhost` only) is signed by a test CA made with `openssl`; a second,
    /// unrelated CA is made too for negative tests.
    pub fn start_ssl(password: &str) -> Result<(Cluster, SslFiles), String> {
        let mut c = Cluster::start()?;
        let dir = c.base.join("tls");
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let files = SslFiles::generate(&dir)?;
        if is_root() {
            let st = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(&dir)
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !st.success() {
                return Err("chown of the tls directory failed".into());
            }
        }
        exec(
            &c.url,
            &format!("ALTER USER postgres PASSWORD '{password}'"),
        )?;
        let hba = c.data.join("pg_hba.conf");
        std::fs::write(
            &hba,
            "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
        )
        .map_err(|e| format!("writing {}: {e}", hba.display()))?;
        c.extra = format!(
            " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            files.server_cert.display(),
            files.server_key.display()
        );
        c.pg_ctl("restart")?;
        Ok((c, files))
    }

    fn pg_ctl(&self, action: &str) -> Result<(), String> {
        let fast = if self.durable {
            ""
        } else {
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        };
        let opts = format!(
            "-p {} -h 127.0.0.1 -k {}{fast} -c max_connections=300{}",
            self.port,
            self.base.display(),
            self.extra
        );
        let log = self.base.join("server.log").to_string_lossy().into_owned();
        let data = self.data.to_string_lossy().into_owned();
        let mut args = vec!["-D", &data, "-l", &log, "-w", "-t", "60"];
        if action != "stop" {
            args.extend(["-o", &opts]);
        }
        args.extend(["-m", "fast", action]);
        pg_tool(&self.bin.join("pg_ctl"), &args).map(|_| ())
    }

    /// `pg_ctl restart -m fast`: every client connection is cut.
    pub fn restart(&self) -> Result<(), String> {
        self.pg_ctl("restart")
    }

    pub fn stop(&self) -> Result<(), String> {
        self.pg_ctl("stop")
    }

    pub fn start_again(&self) -> Result<(), String> {
        self.pg_ctl("start")
    }

    /// Leave the cluster running after drop; a watchdog shell stops it when `pid` exits.
    fn stop_when_process_exits(mut self, pid: u32) -> String {
        self.keep = true;
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {runuser} {pg_ctl} -D {data} -m immediate stop >/dev/null 2>&1; rm -rf {base}",
            runuser = if is_root() {
                "runuser -u postgres --"
            } else {
                ""
            },
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = self.data.display(),
            base = self.base.display(),
        );
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        self.url.clone()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.keep {
            let _ = self.pg_ctl("stop");
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }
}

/// Certificates for a TLS test cluster (PEM files in one directory).
pub struct SslFiles {
    pub ca_cert: PathBuf,
    /// A CA that signed nothing the server presents.
    pub other_ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

impl SslFiles {
    fn generate(dir: &Path) -> Result<SslFiles, String> {
        let ossl = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("openssl")
                .current_dir(dir)
                .args(args)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("running openssl: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "openssl {args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        };
        for ca in ["ca", "otherca"] {
            ossl(&[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=cronsole test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.crt"),
            ])?;
        }
        ossl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ])?;
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
        )
        .map_err(|e| e.to_string())?;
        ossl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.crt",
        ])?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .map_err(|e| e.to_string())?;
        Ok(SslFiles {
            ca_cert: dir.join("ca.crt"),
            other_ca_cert: dir.join("otherca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
        })
    }
}

/// A TLS cluster (see [`Cluster::start_ssl`]), or `None` = skip.
pub fn ssl_cluster(password: &str) -> Option<(Cluster, SslFiles)> {
    if let Err(e) = Command::new("openssl").arg("version").output() {
        skip("openssl", &format!("running `openssl version`: {e}"));
        return None;
    }
    match Cluster::start_ssl(password) {
        Ok(c) => Some(c),
        Err(e) => {
            skip("PostgreSQL with TLS", &e);
            None
        }
    }
}

/// Run SQL statements against `url` (test setup only).
pub fn exec(url: &str, sql: &str) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("connecting to {url}: {e}"))?;
        let h = tokio::spawn(conn);
        let r = client
            .batch_execute(sql)
            .await
            .map_err(|e| format!("{sql}: {e:?}"));
        drop(client);
        let _ = h.await;
        r
    })
}

/// Replace the database name in a `postgres://…/db[?…]` URL.
pub fn with_db(url: &str, db: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let scheme_end = head.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match head[scheme_end..].find('/') {
        Some(i) => &head[..scheme_end + i],
        None => head,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

/// The server URL for this test process (see the module doc), or `None` = skip.
pub fn server() -> Option<String> {
    static SERVER: OnceLock<Result<String, String>> = OnceLock::new();
    let r = SERVER.get_or_init(|| {
        if let Ok(u) = std::env::var("CRONSOLE_TEST_PG_URL")
            && !u.is_empty()
        {
            return Ok(u);
        }
        Cluster::start().map(|c| c.stop_when_process_exits(std::process::id()))
    });
    match r {
        Ok(u) => Some(u.clone()),
        Err(e) => {
            skip("PostgreSQL", e);
            None
        }
    }
}

/// A fresh, empty database for one test: its URL, or `None` = skip.
pub fn database() -> Option<String> {
    let server = server()?;
    let name = format!("cronsole_t_{}", uuid::Uuid::new_v4().simple());
    if let Err(e) = exec(&server, &format!("CREATE DATABASE {name}")) {
        panic!("creating test database {name}: {e}");
    }
    Some(with_db(&server, &name))
}

/// A private cluster (for tests that restart the server), or `None` = skip.
pub fn private_cluster() -> Option<Cluster> {
    match Cluster::start() {
        Ok(c) => Some(c),
        Err(e) => {
            skip("PostgreSQL (initdb)", &e);
            None
        }
    }
}

/// Skip the calling test when no database is available.
#[macro_export]
macro_rules! pg_db_or_skip {
    () => {
        match $crate::support::pg::database() {
            Some(u) => u,
            None => return,
        }
    };
}
