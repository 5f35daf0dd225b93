//! The hardened URL probe of a `monitor: { url }`: fetch one http(s) URL with every guarantee a
//! monitor promises (public addresses only, verified TLS, no redirects, a capped body, one
//! deadline), or say exactly why not.
//!
//! Owns: URL checks before any connection (scheme, userinfo, literal IPs), the pinned resolver,
//! the reqwest client policy (no redirects, no proxies, rustls with full verification via the
//! ring provider) and the bounded, deadline-bound body read. Must not touch: monitor state,
//! hashing, the store.
//!
//! How the address rule is enforced: reqwest asks our [`GuardedResolver`] for the name's
//! addresses; it validates *every* answer with the [`AddressPolicy`] and returns exactly the
//! validated list, so the socket can only ever connect to an address that was checked — a DNS
//! answer that changes between a check and the connect (rebinding) has no second lookup to
//! exploit. reqwest skips the resolver for IP-literal hosts, so those are checked here before the
//! request is built. Any non-public answer rejects the whole name (a mixed answer is not "use the
//! public half").
//!
//! TLS: reqwest 0.13 with `rustls-no-provider` verifies with `rustls-platform-verifier` (the OS
//! trust store: `/etc/ssl/certs` on Linux, read locally, no network) and needs a process-wide
//! crypto provider; [`ensure_crypto_provider`] installs ring once. Hostname and chain are always
//! verified; there is no switch to turn that off.
//!
//! Decisions: a body that is not UTF-8 is hashed as raw bytes and shown
//! lossily; `Accept-Encoding` compression is not negotiated (reqwest is built without it), so the
//! 64 KiB cap applies to the bytes on the wire and cannot be inflated past.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::addr::{AddressPolicy, allow_all, public_only};

/// The most body bytes read: a monitored page is compared, not archived, and a bigger one
/// must not grow the store or memory.
pub const URL_BODY_CAP: usize = 64 * 1024;
/// The default total deadline of one probe, so a slow server delays the run, never stalls it.
pub const URL_DEADLINE: Duration = Duration::from_secs(30);

/// Why a URL probe did not produce a body. `is_bad_url` = knowable from the URL text alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlProbeError {
    #[error("invalid URL '{url}': {why}")]
    Invalid { url: String, why: String },
    #[error("URL scheme '{0}' is not allowed (only http and https)")]
    Scheme(String),
    #[error("URL must not contain credentials (user:password@); rejected before connecting")]
    Userinfo,
    /// The hint names the way out, because the refusal is most often met by someone trying
    /// a local or intranet source on purpose.
    #[error(
        "address rejected: {0} (a private or loopback source needs `allow_private: true` on the \
         monitor; `cronsole probe --allow-private`)"
    )]
    Address(String),
    #[error("timed out after {0:?} (connect + headers + body)")]
    Timeout(Duration),
    #[error("response exceeded 64 KiB")]
    TooLarge,
    #[error("redirect not followed: HTTP {status}, Location: {location}")]
    Redirect { status: u16, location: String },
    #[error("HTTP {0}")]
    Status(u16),
    #[error("request failed: {0}")]
    Transport(String),
}

impl UrlProbeError {
    /// The URL itself is unacceptable (no I/O was needed to know): CLI exit code 2.
    pub fn is_bad_url(&self) -> bool {
        matches!(
            self,
            UrlProbeError::Invalid { .. } | UrlProbeError::Scheme(_) | UrlProbeError::Userinfo
        ) || matches!(self, UrlProbeError::Address(a) if a.starts_with("literal "))
    }
}

/// Everything the URL probe needs besides the URL; [`UrlProbeOptions::default`] is production.
#[derive(Clone)]
pub struct UrlProbeOptions {
    /// Total deadline over connect + headers + body.
    pub deadline: Duration,
    pub body_cap: usize,
    /// Name → addresses. Production: the system resolver ([`SystemResolver`]).
    pub resolver: Arc<dyn Resolve>,
    /// The address rule; `allow_private` on the monitor replaces it with [`allow_all`].
    pub policy: AddressPolicy,
    /// Extra trusted roots (DER) on top of the OS store, e.g. a test CA.
    pub extra_roots_der: Vec<Vec<u8>>,
}

impl Default for UrlProbeOptions {
    fn default() -> Self {
        UrlProbeOptions {
            deadline: URL_DEADLINE,
            body_cap: URL_BODY_CAP,
            resolver: Arc::new(SystemResolver),
            policy: public_only(),
            extra_roots_der: Vec::new(),
        }
    }
}

impl std::fmt::Debug for UrlProbeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlProbeOptions")
            .field("deadline", &self.deadline)
            .field("body_cap", &self.body_cap)
            .finish_non_exhaustive()
    }
}

/// A fetched body (≤ the cap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlBody {
    pub status: u16,
    pub body: Vec<u8>,
}

/// The OS resolver (`getaddrinfo` via tokio).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let it: Addrs = Box::new(addrs.into_iter());
            Ok(it)
        })
    }
}

/// The address rule raised inside the resolver; found again in reqwest's error chain.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Rejected(String);

/// Wraps a resolver: every answer must pass the policy, and only checked addresses are returned,
/// so the connection is pinned to what was validated.
pub struct GuardedResolver {
    inner: Arc<dyn Resolve>,
    policy: AddressPolicy,
}

impl GuardedResolver {
    pub fn new(inner: Arc<dyn Resolve>, policy: AddressPolicy) -> Self {
        GuardedResolver { inner, policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        let fut = self.inner.resolve(name);
        let policy = self.policy.clone();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = fut.await?.collect();
            if addrs.is_empty() {
                return Err(
                    Box::new(Rejected(format!("'{host}' resolved to no address")))
                        as Box<dyn std::error::Error + Send + Sync>,
                );
            }
            for a in &addrs {
                if let Err(why) = policy(a.ip()) {
                    return Err(Box::new(Rejected(format!(
                        "'{host}' resolves to a non-public address: {why}"
                    )))
                        as Box<dyn std::error::Error + Send + Sync>);
                }
            }
            let it: Addrs = Box::new(addrs.into_iter());
            Ok(it)
        })
    }
}

/// Install ring as the process-wide rustls crypto provider (idempotent; a provider installed by
/// someone else first is kept).
pub fn ensure_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means another provider is already installed: that one is used, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Check what can be checked without any I/O: parse, scheme, userinfo, literal IP host.
pub fn precheck(url: &str) -> Result<Url, UrlProbeError> {
    let parsed = Url::parse(url).map_err(|e| UrlProbeError::Invalid {
        url: url.to_string(),
        why: e.to_string(),
    })?;
    match parsed.scheme() {
        "http" | "https" => {}
        other => return Err(UrlProbeError::Scheme(other.to_string())),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlProbeError::Userinfo);
    }
    if parsed.host().is_none() {
        return Err(UrlProbeError::Invalid {
            url: url.to_string(),
            why: "no host".to_string(),
        });
    }
    Ok(parsed)
}

/// The host when it is an IP literal (reqwest connects to those without asking the resolver).
fn literal_ip(url: &Url) -> Option<IpAddr> {
    let h = url.host_str()?;
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    h.parse::<IpAddr>().ok()
}

/// Find our resolver's rejection (or a timeout) in reqwest's error chain.
fn describe(err: &reqwest::Error) -> UrlProbeError {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    let mut parts = Vec::new();
    while let Some(e) = cur {
        if let Some(r) = e.downcast_ref::<Rejected>() {
            return UrlProbeError::Address(r.0.clone());
        }
        let text = e.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        cur = e.source();
    }
    UrlProbeError::Transport(parts.join(": "))
}

fn build_client(
    opts: &UrlProbeOptions,
    policy: AddressPolicy,
) -> Result<reqwest::Client, UrlProbeError> {
    ensure_crypto_provider();
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .tls_backend_rustls()
        .https_only(false)
        .pool_max_idle_per_host(0)
        .user_agent(concat!(
            "cronsole/",
            env!("CARGO_PKG_VERSION"),
            " (monitor)"
        ))
        .dns_resolver(Arc::new(GuardedResolver::new(
            opts.resolver.clone(),
            policy,
        )));
    for der in &opts.extra_roots_der {
        let cert = reqwest::Certificate::from_der(der)
            .map_err(|e| UrlProbeError::Transport(format!("bad extra root certificate: {e}")))?;
        b = b.add_root_certificate(cert);
    }
    b.build()
        .map_err(|e| UrlProbeError::Transport(format!("could not build the HTTP client: {e}")))
}

/// Fetch `url` with every guarantee of the module doc above. `allow_private` lifts only the address
/// rule.
///
/// Cancellation-safe: dropping the future drops the connection.
pub async fn fetch(
    url: &str,
    allow_private: bool,
    opts: &UrlProbeOptions,
) -> Result<UrlBody, UrlProbeError> {
    let parsed = precheck(url)?;
    let policy = if allow_private {
        allow_all()
    } else {
        opts.policy.clone()
    };
    if let Some(ip) = literal_ip(&parsed) {
        policy(ip).map_err(|why| UrlProbeError::Address(format!("literal {why}")))?;
    }
    let client = build_client(opts, policy)?;
    let deadline = opts.deadline;
    let cap = opts.body_cap;
    let work = async move {
        let mut resp = client
            .get(parsed)
            .send()
            .await
            .map_err(|e| describe(&e.without_url()))?;
        let status = resp.status();
        if status.is_redirection() {
            let location = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_else(|| "(none)".to_string());
            return Err(UrlProbeError::Redirect {
                status: status.as_u16(),
                location,
            });
        }
        if !status.is_success() {
            return Err(UrlProbeError::Status(status.as_u16()));
        }
        // Never trust Content-Length: count what actually arrives.
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| describe(&e.without_url()))? {
            if body.len() + chunk.len() > cap {
                return Err(UrlProbeError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(UrlBody {
            status: status.as_u16(),
            body,
        })
    };
    match tokio::time::timeout(deadline, work).await {
        Ok(r) => r,
        Err(_) => Err(UrlProbeError::Timeout(deadline)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precheck_rejects_before_any_io() {
        assert_eq!(
            precheck("file:///etc/passwd").unwrap_err(),
            UrlProbeError::Scheme("file".into())
        );
        assert_eq!(
            precheck("gopher://example.com:70/1").unwrap_err(),
            UrlProbeError::Scheme("gopher".into())
        );
        assert_eq!(
            precheck("https://user:pass@example.com/").unwrap_err(),
            UrlProbeError::Userinfo
        );
        assert_eq!(
            precheck("https://user@example.com/").unwrap_err(),
            UrlProbeError::Userinfo
        );
        assert!(matches!(
            precheck("not a url").unwrap_err(),
            UrlProbeError::Invalid { .. }
        ));
        assert!(precheck("https://example.com/x?y=1").is_ok());
    }

    #[test]
    fn literal_hosts_are_recognised_in_every_spelling() {
        for (u, ip) in [
            ("http://127.0.0.1/", "127.0.0.1"),
            ("http://2130706433/", "127.0.0.1"),
            ("http://0x7f.1/", "127.0.0.1"),
            ("http://127.1/", "127.0.0.1"),
            ("http://[::1]/", "::1"),
            ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1"),
        ] {
            let parsed = precheck(u).unwrap();
            assert_eq!(literal_ip(&parsed), Some(ip.parse().unwrap()), "{u}");
        }
        assert_eq!(literal_ip(&precheck("http://localhost/").unwrap()), None);
    }

    #[test]
    fn bad_url_classification() {
        assert!(UrlProbeError::Userinfo.is_bad_url());
        assert!(UrlProbeError::Address("literal 127.0.0.1 is loopback".into()).is_bad_url());
        assert!(!UrlProbeError::Address("'localhost' resolves to 127.0.0.1".into()).is_bad_url());
        assert!(!UrlProbeError::Status(503).is_bad_url());
    }
}
