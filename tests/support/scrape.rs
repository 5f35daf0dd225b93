//! Reading a `cronsole run --metrics-addr` owner from another process: one HTTP GET, a metric's
//! value, and [`settle`]: waiting for the owner's engine loop to have done, and recorded, all it
//! would do about the store as it is now, before a test asserts that something did not happen.
//!
//! Owns: the client side of the metrics endpoint for tests. Must not touch: the owner's store.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET path` on `addr` (`HOST:PORT`): the status code and the body.
pub fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("sending the request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("reading the answer");
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (code, body.to_string())
}

/// The value on the first line of `text` that starts with `prefix`.
pub fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The owner's idle loop turns so far (turns that began with no claim due and no run in
/// flight); each request also asks an idle loop to turn.
pub fn idle_turns(addr: &str) -> f64 {
    let (code, body) = get(addr, "/metrics");
    match metric(&body, "cronsole_loop_turns_idle_total ") {
        Some(v) if code == 200 => v,
        _ => panic!("no idle-turn counter at {addr} (HTTP {code}):\n{body}"),
    }
}

/// Wait (up to 20 s) for two idle turns of the owner's engine loop after this call: the second
/// began after it, so a claim the owner would (wrongly) make about the store as it is now has
/// been made, and its run recorded.
#[track_caller]
pub fn settle(addr: &str) {
    let from = idle_turns(addr);
    super::wait::wait_until(
        "the owner to settle (two idle loop turns)",
        Duration::from_secs(20),
        || idle_turns(addr) >= from + 2.0,
    );
}
