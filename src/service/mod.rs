//! What a headless cronsole offers the systems around a daemon: Prometheus metrics and a health
//! check over HTTP (`metrics`, `http`), systemd readiness and watchdog (`sdnotify`), and the
//! journald-friendly log format (`journald`).
//!
//! Owns: those integrations. Must not touch: the engine's decisions or the terminal UI; it
//! observes the engine through its public channels and [`crate::engine::Heartbeat`], and the
//! store through the [`crate::store::Store`] trait (wrapped by [`metrics::Metered`] to count
//! errors).

pub mod http;
pub mod journald;
pub mod metrics;
pub mod sdnotify;
