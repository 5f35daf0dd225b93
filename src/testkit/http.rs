//! A small loopback HTTP/1.1 server for tests: every request goes to a handler closure
//! (method, path, headers, body → status, headers, body, optional delay) and is recorded, so
//! tests can assert "zero requests were made" or "the API key travelled in a header only".
//!
//! Owns: the generic test server. Must not touch: production code paths, wire formats of any
//! particular API (`testkit::llm` builds the fake OpenAI/Anthropic endpoints on top of this;
//! hostile servers — slow drip, huge bodies — live in `testkit::hostile`).
//!
//! Why not `wiremock` or a small `axum` app (both were evaluated): both are built on
//! hyper, which normalises what tests here must control or observe byte for byte — a reply
//! delayed mid-body, a request recorded before the handler runs (so a client that timed out
//! still leaves its record), and the `hostile` servers' lying `Content-Length`, slow drip and
//! connections counted at `accept` (a rejected URL must make *no* connection). The handler
//! closure already gives wiremock's matching-and-recording in ~300 lines with no dependency
//! beyond tokio; wiremock would also pull a second HTTP stack into every test build on a
//! 2-core machine. Kept ours.
//!
//! Deliberately minimal: one request per connection (`Connection: close` on every response),
//! `Content-Length` bodies only (what reqwest sends for fixed bodies). Requests are recorded when
//! fully read, before the handler runs, so a timed-out client still leaves a record.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Largest request head or body the server accepts (tests never need more).
const MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;

/// One request as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: String,
    /// Path including any query string, as sent on the request line.
    pub path: String,
    /// Header names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// First value of a header (name is matched case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON, `None` when it is not JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// Whether `needle` appears anywhere in the request line, a header or the body.
    pub fn contains(&self, needle: &str) -> bool {
        self.path.contains(needle)
            || self
                .headers
                .iter()
                .any(|(k, v)| k.contains(needle) || v.contains(needle))
            || self.body_text().contains(needle)
    }
}

/// What the handler answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Wait this long (tokio time) before writing the response.
    pub delay: Option<Duration>,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            delay: None,
        }
    }

    pub fn text(status: u16, body: &str) -> Self {
        Response::new(status)
            .header("content-type", "text/plain; charset=utf-8")
            .body(body.as_bytes().to_vec())
    }

    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        Response::new(status)
            .header("content-type", "application/json")
            .body(value.to_string().into_bytes())
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }

    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = Some(d);
        self
    }
}

type Handler = dyn Fn(&Request) -> Response + Send + Sync;

/// A running loopback server; stops when dropped.
pub struct TestServer {
    addr: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    task: JoinHandle<()>,
}

impl TestServer {
    /// Bind 127.0.0.1 on a free port and serve every request with `handler`.
    pub async fn start(
        handler: impl Fn(&Request) -> Response + Send + Sync + 'static,
    ) -> std::io::Result<TestServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let recorded = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let handler = Arc::clone(&handler);
                let recorded = Arc::clone(&recorded);
                tokio::spawn(async move {
                    // A client that hangs up mid-request is not an error worth reporting.
                    let _ = serve_one(stream, handler, recorded).await;
                });
            }
        });
        Ok(TestServer {
            addr,
            requests,
            task,
        })
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn request_count(&self) -> usize {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_one(
    mut stream: TcpStream,
    handler: Arc<Handler>,
    recorded: Arc<Mutex<Vec<Request>>>,
) -> std::io::Result<()> {
    let Some(req) = read_request(&mut stream).await? else {
        return Ok(());
    };
    recorded
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(req.clone());
    let resp = handler(&req);
    if let Some(d) = resp.delay {
        tokio::time::sleep(d).await;
    }
    let mut head = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    for (k, v) in &resp.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        resp.body.len()
    ));
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&resp.body).await?;
    stream.flush().await?;
    stream.shutdown().await
}

/// Read one request; `Ok(None)` when the peer closed before sending a full head.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = find(&buf, b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > MAX_REQUEST_BYTES {
            return Err(std::io::Error::other("request head too large"));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    if len > MAX_REQUEST_BYTES {
        return Err(std::io::Error::other("request body too large"));
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    Ok(Some(Request {
        method,
        path,
        headers,
        body,
    }))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_requests_and_answers_with_the_handler() {
        let srv = TestServer::start(|req| {
            if req.path == "/teapot" {
                Response::text(418, "short and stout").header("x-kind", "teapot")
            } else {
                Response::json(200, &serde_json::json!({"echo": req.body_text()}))
            }
        })
        .await
        .unwrap();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let r = client
            .post(format!("{}/x?y=1", srv.url()))
            .header("X-Secret", "s3")
            .body("hello")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["echo"], "hello");
        let r = client
            .get(format!("{}/teapot", srv.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 418);
        assert_eq!(r.headers()["x-kind"], "teapot");
        assert_eq!(r.text().await.unwrap(), "short and stout");

        let reqs = srv.requests();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].method, "POST");
        assert_eq!(reqs[0].path, "/x?y=1");
        assert_eq!(reqs[0].header("x-secret"), Some("s3"));
        assert_eq!(reqs[0].body, b"hello");
        assert!(reqs[0].contains("s3"));
        assert!(!reqs[1].contains("s3"));
        assert_eq!(reqs[1].method, "GET");
    }

    #[tokio::test]
    async fn a_fresh_server_has_seen_nothing() {
        let srv = TestServer::start(|_| Response::new(204)).await.unwrap();
        assert_eq!(srv.request_count(), 0);
        assert!(srv.url().starts_with("http://127.0.0.1:"));
    }
}
