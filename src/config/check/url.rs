//! A URL monitor's host, checked as the probe will check it: without `allow_private`, an IP
//! literal that is not public is refused up front, and a `localhost` name is warned about.
//!
//! Owns: that one check. Must not touch: which addresses are public (`crate::addr` decides, for
//! the probe too), the rest of the monitor's keys (`jobs`).

use super::checker::{Checker, key};
use crate::config::yaml::Seg;

impl Checker<'_> {
    /// A URL monitor without `allow_private` whose host the probe always refuses: an IP
    /// literal that is not public is an error (every run would fail before connecting, as
    /// `probe` shows); a `localhost` name is a warning (it resolves to loopback, checked when
    /// the run resolves it).
    pub(super) fn private_url(&mut self, url: &str, p: &[Seg]) {
        let Ok(u) = reqwest::Url::parse(url.trim()) else {
            return;
        };
        let fix = "the monitor refuses private and loopback addresses unless the monitor says \
                   `allow_private: true`";
        let Some(host) = u.host_str() else {
            return;
        };
        // IPv6 literals come bracketed; the parser has already normalised IPv4 forms
        // (`2130706433`, `0x7f.1`) to dotted quads, as the probe's client sees them.
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
            self.private_ip(ip, fix, p);
            return;
        }
        let d = host.trim_end_matches('.').to_ascii_lowercase();
        if d == "localhost" || d.ends_with(".localhost") {
            self.warn(
                key(p, "url"),
                format!("'{d}' resolves to loopback, so every run would be rejected: {fix}"),
            );
        }
    }

    fn private_ip(&mut self, ip: std::net::IpAddr, fix: &str, p: &[Seg]) {
        if let Some(why) = crate::addr::classify(ip) {
            self.error(
                key(p, "url"),
                format!("{ip} is {why}, so every run would be rejected: {fix}"),
            );
        }
    }
}
