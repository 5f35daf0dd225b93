//! The outbound HTTP client every caller of a remote server shares: LLM providers, webhook
//! sinks and MCP servers over streamable HTTP.
//!
//! Owns: building the client (rustls with the `ring` provider, no redirects, optional system
//! proxy, the cronsole user agent) and `error_chain`, the one way an HTTP error is turned into
//! text with its causes. Must not touch: requests themselves, timeouts per request, secrets (each
//! caller redacts its own), and the URL monitor, which has its own hardened client.
//!
//! It sits below `llm` and `tools` so both take the client from here and neither imports the
//! other for it.

use std::time::Duration;

/// Errors building the shared HTTP client.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct ClientError(String);

/// Options for [`http_client`].
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub connect_timeout: Duration,
    /// Honour `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` (operators behind a proxy need it).
    pub system_proxy: bool,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            system_proxy: true,
        }
    }
}

/// The client shared by LLM calls, webhooks and MCP servers over HTTP.
///
/// reqwest 0.13 is built with `rustls-no-provider`, and panics at build time when no rustls
/// crypto provider is installed; this installs `ring` as the process default if none is (an
/// already-installed provider is kept). Certificates are checked by reqwest's default
/// `rustls-platform-verifier` (0.7), i.e. the operating system's trust store: on Linux it loads
/// the system CA bundle through `rustls-native-certs` (honouring `SSL_CERT_FILE` /
/// `SSL_CERT_DIR`), so a container without a CA bundle fails HTTPS handshakes with a
/// certificate error rather than trusting nothing silently. No bundled webpki roots.
/// Per-request timeouts are applied by the callers.
pub fn http_client(opts: &HttpOptions) -> Result<reqwest::Client, ClientError> {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err = another thread installed one first; either way a provider is now set.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let mut b = reqwest::Client::builder()
        .user_agent(concat!("cronsole/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(opts.connect_timeout)
        .redirect(reqwest::redirect::Policy::none());
    if !opts.system_proxy {
        b = b.no_proxy();
    }
    b.build().map_err(|e| ClientError(error_chain(&e)))
}

/// An error and its causes, `a: b: c` (reqwest's top-level text alone hides the cause).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}
