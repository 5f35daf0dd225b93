//! The real MCP servers the tests start: `@modelcontextprotocol/server-everything` from the npm
//! registry and a small server on the Python SDK (`tests/mcp_servers/py_server.py`), both
//! installed from the committed lock files by `.ci/mcp-servers` (which `.ci/run` calls) into a
//! cache folder, never fetched at test time.
//!
//! Owns: finding that folder (`CRONSOLE_TEST_MCP_DIR`, else `target/mcp-test-servers` of this
//! checkout), the command lines of the servers, and starting the Python server over
//! streamable HTTP on a loopback port. Must not touch: production code.

use std::path::PathBuf;
use std::time::Duration;

/// The installed test servers.
#[derive(Debug, Clone)]
pub struct TestServers {
    dir: PathBuf,
}

/// This checkout's root (where `tests/mcp_servers` lives).
pub fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl TestServers {
    /// The installed servers, or `None` after [`crate::testkit::skip::skip`] said why (a
    /// failure under `CI=true`).
    #[track_caller]
    pub fn find() -> Option<TestServers> {
        let dir = std::env::var_os("CRONSOLE_TEST_MCP_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| checkout().join("target/mcp-test-servers"));
        let s = TestServers { dir };
        for need in [s.python(), s.everything_js()] {
            if !need.exists() {
                crate::testkit::skip::skip(
                    "MCP test servers",
                    &format!("{} is missing: run .ci/mcp-servers", need.display()),
                );
                return None;
            }
        }
        Some(s)
    }

    /// The venv's Python (with the `mcp` SDK).
    pub fn python(&self) -> PathBuf {
        self.dir.join("venv/bin/python")
    }

    fn everything_js(&self) -> PathBuf {
        self.dir
            .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
    }

    /// A script of the test tree (`tests/mcp_servers/NAME`).
    pub fn script(name: &str) -> PathBuf {
        checkout().join("tests/mcp_servers").join(name)
    }

    /// `server-everything` over stdio.
    pub fn everything_argv(&self) -> Vec<String> {
        vec![
            "node".to_string(),
            self.everything_js().to_string_lossy().into_owned(),
            "stdio".to_string(),
        ]
    }

    /// The Python SDK server over stdio.
    pub fn py_stdio_argv(&self) -> Vec<String> {
        self.py_argv("py_server.py", &["stdio"])
    }

    /// A Python script of the test tree with arguments, run by the venv's Python.
    pub fn py_argv(&self, script: &str, args: &[&str]) -> Vec<String> {
        let mut v = vec![
            self.python().to_string_lossy().into_owned(),
            Self::script(script).to_string_lossy().into_owned(),
        ];
        v.extend(args.iter().map(|a| a.to_string()));
        v
    }

    /// The Python SDK server over streamable HTTP on a free loopback port, running until the
    /// returned handle is dropped.
    pub fn py_http(&self) -> HttpServer {
        self.py_http_with(&[])
    }

    /// [`Self::py_http`] with variables added to the server's environment (`ECHO_BEARER`: see
    /// the script's doc).
    pub fn py_http_with(&self, env: &[(&str, &str)]) -> HttpServer {
        let port = free_port();
        let child = std::process::Command::new(self.python())
            .arg(Self::script("py_server.py"))
            .arg("http")
            .arg(port.to_string())
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start the Python MCP server: {e}"));
        let server = HttpServer { child, port };
        server.wait_listening(Duration::from_secs(30));
        server
    }
}

/// A test server process listening on a loopback port; killed when dropped.
pub struct HttpServer {
    child: std::process::Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl HttpServer {
    /// Its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn wait_listening(&self, limit: Duration) {
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the test MCP server did not listen on port {} within {limit:?}",
            self.port
        );
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}
