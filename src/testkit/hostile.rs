//! Hostile HTTP servers for the URL monitor's guarantees: raw tokio TCP listeners that
//! count every accepted connection (so a test can prove a rejected URL made *no* connection) and
//! misbehave on purpose — slow drip, oversized or lying bodies, redirects, error statuses.
//!
//! Owns: test servers only. Must not touch: production code paths. Speaks just enough HTTP/1.1
//! by hand (read the request head, write bytes) so the misbehaviour is exact.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the server does with each connection after reading the request head.
#[derive(Debug, Clone)]
pub enum Behavior {
    /// `200 OK` with this body and a correct Content-Length.
    Ok(Vec<u8>),
    /// This status with a short body.
    Status(u16),
    /// `302 Found` with this `Location`.
    Redirect(String),
    /// `200 OK` with `size` bytes of body. `content_length`: the header to send (may lie, or be
    /// absent for a close-delimited body).
    Huge {
        size: usize,
        content_length: Option<usize>,
    },
    /// `200 OK` headers promising a large body, then one byte per `interval`, forever.
    SlowDrip { interval: Duration },
    /// Write these bytes verbatim as soon as the connection is accepted (without waiting for a
    /// request, so it also answers a TLS ClientHello) and close.
    Raw(Vec<u8>),
}

/// A running hostile server; stops when dropped.
#[derive(Debug)]
pub struct HostileServer {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl HostileServer {
    /// Listen on `127.0.0.1` on a free port.
    pub async fn start(behavior: Behavior) -> std::io::Result<Self> {
        Self::start_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, behavior).await
    }

    /// Listen on `ip:port` (`port` 0 = any free port).
    pub async fn start_on(ip: IpAddr, port: u16, behavior: Behavior) -> std::io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::new(ip, port)).await?;
        let addr = listener.local_addr()?;
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let b = behavior.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, b).await;
                });
            }
        });
        Ok(HostileServer {
            addr,
            accepted,
            task,
        })
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// `http://IP:PORT{path}` (IPv6 bracketed).
    pub fn url(&self, path: &str) -> String {
        match self.addr.ip() {
            IpAddr::V4(ip) => format!("http://{ip}:{}{path}", self.addr.port()),
            IpAddr::V6(ip) => format!("http://[{ip}]:{}{path}", self.addr.port()),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read_head(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 64 * 1024 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        302 => "Found",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

async fn serve(mut stream: TcpStream, behavior: Behavior) -> std::io::Result<()> {
    if !matches!(behavior, Behavior::Raw(_)) {
        read_head(&mut stream).await?;
    }
    match behavior {
        Behavior::Ok(body) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(&body).await?;
        }
        Behavior::Status(code) => {
            let body = format!("status {code}\n");
            let head = format!(
                "HTTP/1.1 {code} {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                reason(code),
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
        }
        Behavior::Redirect(location) => {
            let head = format!(
                "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await?;
        }
        Behavior::Huge {
            size,
            content_length,
        } => {
            let mut head = String::from("HTTP/1.1 200 OK\r\nConnection: close\r\n");
            if let Some(cl) = content_length {
                head.push_str(&format!("Content-Length: {cl}\r\n"));
            }
            head.push_str("\r\n");
            stream.write_all(head.as_bytes()).await?;
            let block = vec![b'A'; 8192];
            let mut left = size;
            while left > 0 {
                let n = left.min(block.len());
                stream.write_all(&block[..n]).await?;
                left -= n;
            }
        }
        Behavior::SlowDrip { interval } => {
            stream
                .write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n",
                )
                .await?;
            loop {
                stream.write_all(b"x").await?;
                stream.flush().await?;
                tokio::time::sleep(interval).await;
            }
        }
        Behavior::Raw(bytes) => {
            stream.write_all(&bytes).await?;
        }
    }
    stream.flush().await?;
    let _ = stream.shutdown().await;
    Ok(())
}
