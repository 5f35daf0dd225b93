//! systemd's notify protocol (`Type=notify`): `READY=1` once the engine completed its first
//! claim cycle, `WATCHDOG=1` while the engine loop turns, `STOPPING=1` at shutdown, `STATUS=`
//! lines. Active only when `$NOTIFY_SOCKET` is set (a unix datagram socket path, or `@name` for
//! the abstract namespace); otherwise every call is a no-op.
//!
//! Owns: the socket and the watchdog pacing. Must not touch: the engine (it reads the
//! [`Heartbeat`] only). No crate: the protocol is one datagram of `KEY=VALUE` lines.

use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine::Heartbeat;

/// Where to send notifications, if anywhere.
#[derive(Debug, Clone)]
pub struct Notifier {
    path: Option<String>,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET` (unset or empty: disabled).
    pub fn from_env() -> Notifier {
        Notifier {
            path: std::env::var("NOTIFY_SOCKET")
                .ok()
                .filter(|p| !p.is_empty()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.path.is_some()
    }

    /// Send one message (`"READY=1\nSTATUS=…"`); failures are logged, never fatal.
    pub fn send(&self, msg: &str) {
        let Some(path) = &self.path else { return };
        if let Err(e) = send_to(path, msg) {
            tracing::warn!(error = %e, socket = %path, "sd_notify failed");
        }
    }
}

fn send_to(path: &str, msg: &str) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    if let Some(name) = path.strip_prefix('@') {
        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sock.send_to_addr(msg.as_bytes(), &addr)?;
            return Ok(());
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = name;
            return Err(std::io::Error::other("abstract sockets need Linux"));
        }
    }
    sock.send_to(msg.as_bytes(), path)?;
    Ok(())
}

/// The watchdog interval systemd asked for (`$WATCHDOG_USEC`, for this process when
/// `$WATCHDOG_PID` is set): we ping at half of it.
pub fn watchdog_interval() -> Option<Duration> {
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.trim() != std::process::id().to_string()
    {
        return None;
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Tell systemd we are ready once the engine finished a claim cycle, then keep the watchdog fed
/// while the loop turns (no ping when it stalls longer than `max_quiet`: systemd then restarts
/// us, which is the point). Ends at `stop`.
pub async fn supervise(
    notifier: Notifier,
    heartbeat: Arc<Heartbeat>,
    max_quiet: Duration,
    status: String,
    stop: CancellationToken,
) {
    if !notifier.enabled() {
        return;
    }
    while heartbeat.claim_cycles() == 0 {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
    notifier.send(&format!("READY=1\nSTATUS={status}"));
    let Some(every) = watchdog_interval() else {
        stop.cancelled().await;
        return;
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        if heartbeat.check(max_quiet).await <= max_quiet {
            notifier.send("WATCHDOG=1");
        } else {
            tracing::error!(
                quiet_s = heartbeat.since_last_turn().as_secs_f64(),
                "engine loop stalled; not feeding the systemd watchdog"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reaches_a_bound_datagram_socket() {
        let dir = crate::testkit::tmp::TempDir::new("sdn");
        let path = dir.join("notify.sock");
        let rx = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            path: Some(path.to_string_lossy().into_owned()),
        };
        n.send("READY=1\nSTATUS=test");
        let mut buf = [0u8; 256];
        let got = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..got], b"READY=1\nSTATUS=test");
        // Disabled: nothing is sent and nothing fails.
        Notifier { path: None }.send("READY=1");
    }
}
