//! Connection setup for the PostgreSQL store: turns a `postgres://` URL into a driver `Config`
//! plus a TLS connector, with libpq's meanings for the TLS parameters and libpq's password
//! sources.
//!
//! Owns: the `sslmode`/`sslrootcert`/`sslcert`/`sslkey` URL parameters (and their `PGSSL*`
//! environment defaults), the rustls client configuration and its certificate verifiers, the
//! password lookup (URL, then `PGPASSWORD`, then the pgpass file). Must not touch: pooling, SQL,
//! the store's semantics.
//!
//! Why our own `MakeTlsConnect` over `tokio-postgres-rustls`: that crate offers one rustls
//! config for every connection and knows nothing of libpq's modes; `verify-ca` (chain checked,
//! host name not), `prefer`/`require` without verification and the libpq error wording are what
//! we need, and they are a verifier each. `tokio-rustls` (already in the tree through reqwest)
//! does the stream.
//!
//! libpq meanings, as implemented:
//! - `sslmode=disable` plaintext; `prefer` (the default) TLS when the server offers it, no
//!   certificate check; `require` TLS or fail, no certificate check — unless `sslrootcert` is
//!   given, in which case it verifies the chain like `verify-ca` (libpq does the same);
//!   `verify-ca` TLS, chain checked against the root certificates, host name not;
//!   `verify-full` chain and host name checked.
//! - `sslrootcert=FILE` (PEM, any number of certificates) or `sslrootcert=system` (the OS
//!   store; `SSL_CERT_FILE`/`SSL_CERT_DIR` override it). For `verify-*` without it,
//!   `~/.postgresql/root.crt`, an error naming that path when it is missing.
//! - `sslcert`/`sslkey` (PEM) present a client certificate; by default
//!   `~/.postgresql/postgresql.crt`/`.key` when both exist. A key file readable by group or
//!   others is refused, as libpq does.
//! - Passwords: from the URL, else `PGPASSWORD`, else `PGPASSFILE` or `~/.pgpass` (ignored with a
//!   warning when group/world readable). Errors never quote a password or key material: the
//!   URL in messages is the redacted form, key files are named by path only.
//! - TLS channel binding (`SCRAM-SHA-256-PLUS`) is not offered; SCRAM without it is used.

use crate::store::OpenError;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Config;
use tokio_postgres::config::SslMode as DriverSslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

use crate::store::{StoreError, StoreResult};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it, plaintext otherwise; no certificate check.
    Prefer,
    /// TLS or fail; no certificate check unless `sslrootcert` is given.
    Require,
    /// TLS, chain checked against the root certificates; host name not checked.
    VerifyCa,
    /// TLS, chain and host name checked.
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = StoreError;
    fn from_str(s: &str) -> StoreResult<SslMode> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // libpq accepts `allow` (try plaintext first); we have no plaintext-then-TLS retry,
            // so say so rather than silently doing something else.
            other => {
                return Err(bad_location(format!(
                    "sslmode '{other}' is not supported (use disable, prefer, require, verify-ca or verify-full)"
                )));
            }
        })
    }
}

/// Where the trusted root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// Not given: `~/.postgresql/root.crt` if the mode verifies.
    Default,
    /// `sslrootcert=FILE`: the PEM certificates in this file.
    File(PathBuf),
    /// `sslrootcert=system`: the operating system's store.
    System,
}

/// The TLS half of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `sslmode`.
    pub mode: SslMode,
    /// Where the trusted roots come from.
    pub root_cert: RootCert,
    /// `sslcert`: the client certificate to present (PEM).
    pub cert: Option<PathBuf>,
    /// `sslkey`: its private key (PEM; refused when group or others can read it).
    pub key: Option<PathBuf>,
}

/// Split our TLS parameters out of `url` (the driver rejects `verify-*` and `sslrootcert`),
/// apply the `PGSSL*` environment defaults, parse the rest, and fill in the password.
pub fn parse(url: &str) -> StoreResult<(Config, TlsSettings)> {
    parse_with_env(url, &|k| std::env::var(k).ok())
}

fn parse_with_env(
    url: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> StoreResult<(Config, TlsSettings)> {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, q),
        None => (url, ""),
    };
    let mut kept = Vec::new();
    let mut mode = env("PGSSLMODE");
    let mut root = env("PGSSLROOTCERT");
    let mut cert = env("PGSSLCERT");
    let mut key = env("PGSSLKEY");
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let value = || percent_decode(v);
        match k {
            "sslmode" => mode = Some(value()?),
            "sslrootcert" => root = Some(value()?),
            "sslcert" => cert = Some(value()?),
            "sslkey" => key = Some(value()?),
            _ => kept.push(pair),
        }
    }
    let mode: SslMode = match mode.as_deref() {
        Some(m) => m.parse()?,
        None => SslMode::Prefer,
    };
    let root_cert = match root.as_deref() {
        None | Some("") => RootCert::Default,
        Some("system") => RootCert::System,
        Some(p) => RootCert::File(PathBuf::from(p)),
    };
    let rest = if kept.is_empty() {
        head.to_string()
    } else {
        format!("{head}?{}", kept.join("&"))
    };
    let mut cfg = Config::from_str(&rest).map_err(|e| {
        bad_location(format!(
            "invalid PostgreSQL URL (expected postgres://user@host:port/database): {e}"
        ))
    })?;
    cfg.ssl_mode(match mode {
        SslMode::Disable => DriverSslMode::Disable,
        SslMode::Prefer => DriverSslMode::Prefer,
        _ => DriverSslMode::Require,
    });
    if cfg.get_password().is_none() {
        if let Some(pw) = env("PGPASSWORD").filter(|p| !p.is_empty()) {
            cfg.password(pw);
        } else if let Some(pw) = pgpass_password(&cfg, env) {
            cfg.password(pw);
        }
    }
    let tls = TlsSettings {
        mode,
        root_cert,
        cert: cert.filter(|c| !c.is_empty()).map(PathBuf::from),
        key: key.filter(|k| !k.is_empty()).map(PathBuf::from),
    };
    Ok((cfg, tls))
}

fn percent_decode(s: &str) -> StoreResult<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    bad_location(format!("bad percent-escape in PostgreSQL URL near '{s}'"))
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad_location("PostgreSQL URL parameter is not UTF-8"))
}

fn home(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    env("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// The password for `cfg` from the pgpass file, if any line matches.
fn pgpass_password(cfg: &Config, env: &dyn Fn(&str) -> Option<String>) -> Option<Vec<u8>> {
    use tokio_postgres::config::Host;
    let path = match env("PGPASSFILE").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => home(env)?.join(".pgpass"),
    };
    let meta = std::fs::metadata(&path).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(file = %path.display(), "password file has group or world access; permissions should be u=rw (0600) or less; ignoring it");
            return None;
        }
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let host = match cfg.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(_)) => "localhost".to_string(),
        None => "localhost".to_string(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = cfg.get_user().unwrap_or_default().to_string();
    let db = cfg.get_dbname().unwrap_or(&user).to_string();
    pgpass_lookup(&text, &host, &port, &db, &user).map(String::into_bytes)
}

/// The first matching line's password (`host:port:db:user:password`, `*` matches anything,
/// `\:` and `\\` escape).
fn pgpass_lookup(text: &str, host: &str, port: &str, db: &str, user: &str) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = Vec::with_capacity(5);
        let mut cur = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                }
                ':' if fields.len() < 4 => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        if fields.len() != 5 {
            continue;
        }
        let want = [host, port, db, user];
        if fields[..4]
            .iter()
            .zip(want)
            .all(|(f, w)| f == "*" || f == w)
        {
            return Some(fields[4].clone());
        }
    }
    None
}

/// A connection string or TLS setting that cannot work: bad input (exit 2).
fn bad_location(what: impl Into<String>) -> StoreError {
    StoreError::Open(OpenError::BadLocation {
        what: what.into(),
        source: None,
    })
}

/// A description of a TLS setup problem, never containing key material.
fn tls_err(what: String) -> StoreError {
    bad_location(format!("PostgreSQL TLS setup: {what}"))
}

fn read_certs(path: &Path) -> StoreResult<Vec<CertificateDer<'static>>> {
    let iter = CertificateDer::pem_file_iter(path).map_err(|e| {
        tls_err(format!(
            "cannot read certificate file {}: {e}",
            path.display()
        ))
    })?;
    let certs = iter
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_err(format!("bad certificate in {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(tls_err(format!("no certificate in {}", path.display())));
    }
    Ok(certs)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Build the TLS connector for `settings` (files are read here, once, not per connection).
pub fn connector(settings: &TlsSettings) -> StoreResult<MakeRustls> {
    connector_with_env(settings, &|k| std::env::var(k).ok())
}

fn connector_with_env(
    settings: &TlsSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> StoreResult<MakeRustls> {
    if settings.mode == SslMode::Disable {
        return Ok(MakeRustls {
            config: None,
            check: Check::None,
            roots_from: String::new(),
        });
    }
    let provider = provider();
    // libpq: `require` with an explicit root certificate verifies the chain.
    let check = match settings.mode {
        SslMode::VerifyFull => Check::Full,
        SslMode::VerifyCa => Check::Chain,
        SslMode::Require if settings.root_cert != RootCert::Default => Check::Chain,
        _ => Check::None,
    };
    let (roots, roots_from) = root_certs(settings, check, env)?;
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(format!("{e}")))?;
    let builder = if check == Check::None {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoCheck(
                provider.signature_verification_algorithms,
            )))
    } else {
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::clone(&provider),
        )
        .build()
        .map_err(|e| tls_err(format!("{e}")))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Verify {
                inner: webpki,
                check_name: check == Check::Full,
            }))
    };
    let (cert, key) = client_cert_files(settings, env)?;
    let config = match (cert, key) {
        (Some(c), Some(k)) => {
            let chain = read_certs(&c)?;
            check_key_permissions(&k)?;
            // The key's parse error is replaced by our own words: never echo key material.
            let key = PrivateKeyDer::from_pem_file(&k).map_err(|_| {
                tls_err(format!(
                    "cannot read a PEM private key from sslkey {}",
                    k.display()
                ))
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                tls_err(format!(
                    "client certificate {} does not match key {}: {}",
                    c.display(),
                    k.display(),
                    e
                ))
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(MakeRustls {
        config: Some(Arc::new(config)),
        check,
        roots_from,
    })
}

/// The root certificates a verifying `check` trusts, and where they come from (for messages).
fn root_certs(
    settings: &TlsSettings,
    check: Check,
    env: &dyn Fn(&str) -> Option<String>,
) -> StoreResult<(RootCertStore, String)> {
    let mut roots = RootCertStore::empty();
    let roots_from = match (&settings.root_cert, check) {
        (_, Check::None) => String::new(),
        (RootCert::System, _) => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default();
                return Err(tls_err(format!(
                    "sslrootcert=system but no usable system root certificate was found{why}"
                )));
            }
            "the system's root certificates".to_string()
        }
        (RootCert::File(p), _) => {
            roots.add_parsable_certificates(read_certs(p)?);
            format!("sslrootcert {}", p.display())
        }
        (RootCert::Default, _) => {
            let p = home(env)
                .map(|h| h.join(".postgresql/root.crt"))
                .ok_or_else(|| {
                    tls_err("sslmode verifies the server but no sslrootcert was given and $HOME is not set".into())
                })?;
            if !p.exists() {
                return Err(tls_err(format!(
                    "sslmode verifies the server certificate but root certificate file {} does not exist; give sslrootcert=FILE (or sslrootcert=system), or use sslmode=require",
                    p.display()
                )));
            }
            roots.add_parsable_certificates(read_certs(&p)?);
            format!("sslrootcert {}", p.display())
        }
    };
    if check != Check::None && roots.is_empty() {
        return Err(tls_err(format!(
            "no usable root certificate in {roots_from}"
        )));
    }
    Ok((roots, roots_from))
}

/// The client certificate and key files: the given ones (`sslkey` defaults to the certificate's
/// name with `.key`), else `~/.postgresql/postgresql.{crt,key}` when both exist, as libpq does.
fn client_cert_files(
    settings: &TlsSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> StoreResult<(Option<PathBuf>, Option<PathBuf>)> {
    Ok(match (&settings.cert, &settings.key) {
        (Some(c), Some(k)) => (Some(c.clone()), Some(k.clone())),
        (Some(c), None) => (Some(c.clone()), Some(c.with_extension("key"))),
        (None, Some(_)) => {
            return Err(tls_err("sslkey given without sslcert".into()));
        }
        (None, None) => {
            let d = home(env).map(|h| h.join(".postgresql"));
            match d {
                Some(d)
                    if d.join("postgresql.crt").is_file() && d.join("postgresql.key").is_file() =>
                {
                    (
                        Some(d.join("postgresql.crt")),
                        Some(d.join("postgresql.key")),
                    )
                }
                _ => (None, None),
            }
        }
    })
}

fn check_key_permissions(path: &Path) -> StoreResult<()> {
    let meta = std::fs::metadata(path)
        .map_err(|e| tls_err(format!("cannot read sslkey {}: {e}", path.display())))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = meta.permissions().mode();
        // libpq: u=rw (0600) or less, or 0640 when owned by root.
        let allowed = if meta.uid() == 0 { 0o037 } else { 0o077 };
        if mode & allowed != 0 {
            return Err(tls_err(format!(
                "private key file {} has group or world access; permissions should be u=rw (0600) or less",
                path.display()
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = meta;
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    None,
    Chain,
    Full,
}

/// `prefer`/`require`: encryption without authentication of the server (libpq's meaning).
/// Handshake signatures are still verified, so the session is at least bound to the key the
/// server presented.
#[derive(Debug)]
struct NoCheck(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca` / `verify-full`: webpki's chain check; the host-name check only for `full`.
#[derive(Debug)]
struct Verify {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    check_name: bool,
}

impl ServerCertVerifier for Verify {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            // webpki checks the chain before the name: a name error means the chain was good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The `MakeTlsConnect` handed to the driver (cheap to clone: one shared rustls config).
#[derive(Clone)]
pub struct MakeRustls {
    config: Option<Arc<ClientConfig>>,
    check: Check,
    roots_from: String,
}

impl fmt::Debug for MakeRustls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MakeRustls")
            .field("tls", &self.config.is_some())
            .field("check", &self.check)
            .finish()
    }
}

/// A TLS failure in words an operator can act on.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

impl MakeTlsConnect<tokio_postgres::Socket> for MakeRustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = TlsError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, TlsError> {
        // A Unix socket has no host name (""): fail only if TLS is actually attempted.
        let name = ServerName::try_from(domain.to_string()).ok();
        Ok(RustlsConnect {
            config: self.config.clone(),
            name,
            host: domain.to_string(),
            roots_from: self.roots_from.clone(),
        })
    }
}

/// One connection's TLS handshake, made by [`MakeRustls`] for its host.
pub struct RustlsConnect {
    config: Option<Arc<ClientConfig>>,
    name: Option<ServerName<'static>>,
    host: String,
    roots_from: String,
}

impl TlsConnect<tokio_postgres::Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = TlsError;
    type Future = Pin<Box<dyn Future<Output = Result<RustlsStream, TlsError>> + Send>>;

    fn connect(self, stream: tokio_postgres::Socket) -> Self::Future {
        Box::pin(async move {
            let Some(config) = self.config else {
                return Err(TlsError("TLS is disabled (sslmode=disable)".into()));
            };
            let Some(name) = self.name else {
                return Err(TlsError(format!(
                    "'{}' is not a valid TLS server name",
                    self.host
                )));
            };
            let s = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map_err(|e| TlsError(explain(&e, &self.host, &self.roots_from)))?;
            Ok(RustlsStream(Box::new(s)))
        })
    }
}

/// Name the certificate problem the way an operator thinks of it.
fn explain(e: &std::io::Error, host: &str, roots_from: &str) -> String {
    let Some(rustls::Error::InvalidCertificate(ce)) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return format!("TLS handshake with {host} failed: {e}");
    };
    let what = match ce {
        CertificateError::UnknownIssuer => {
            format!(
                "the server's certificate is not signed by a trusted CA (checked against {roots_from})"
            )
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!(
                "the server's certificate is not valid for host name '{host}' (sslmode=verify-full checks it; verify-ca does not)"
            )
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "the server's certificate has expired".to_string()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "the server's certificate is not valid yet".to_string()
        }
        CertificateError::Revoked => "the server's certificate is revoked".to_string(),
        other => format!("the server's certificate was rejected: {other:?}"),
    };
    format!("TLS certificate verification failed for {host}: {what}")
}

/// The encrypted stream (boxed: the rustls state is large and moves once per connection).
pub struct RustlsStream(Box<tokio_rustls::client::TlsStream<tokio_postgres::Socket>>);

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn libpq_tls_parameters_are_split_out_and_default_to_prefer() {
        let (cfg, tls) = parse_with_env(
            "postgres://u@db.example.com:6543/app?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
            &env_of(&[]),
        )
        .unwrap();
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert, RootCert::File("/etc/ca.pem".into()));
        assert_eq!(cfg.get_ssl_mode(), DriverSslMode::Require);
        assert_eq!(cfg.get_application_name(), Some("x"));
        let (cfg, tls) = parse_with_env("postgres://u@h/d", &env_of(&[])).unwrap();
        assert_eq!(tls.mode, SslMode::Prefer);
        assert_eq!(cfg.get_ssl_mode(), DriverSslMode::Prefer);
        let (_, tls) = parse_with_env(
            "postgres://u@h/d?sslrootcert=system",
            &env_of(&[("PGSSLMODE", "verify-ca")]),
        )
        .unwrap();
        assert_eq!(
            (tls.mode, tls.root_cert),
            (SslMode::VerifyCa, RootCert::System)
        );
        let e = parse_with_env("postgres://u@h/d?sslmode=allow", &env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sslmode 'allow' is not supported"), "{e}");
    }

    #[test]
    fn password_comes_from_url_then_pgpassword_then_pgpass() {
        let (cfg, _) = parse_with_env(
            "postgres://u:inurl@h/d",
            &env_of(&[("PGPASSWORD", "fromenv")]),
        )
        .unwrap();
        assert_eq!(cfg.get_password(), Some(&b"inurl"[..]));
        let (cfg, _) =
            parse_with_env("postgres://u@h/d", &env_of(&[("PGPASSWORD", "fromenv")])).unwrap();
        assert_eq!(cfg.get_password(), Some(&b"fromenv"[..]));

        let dir = crate::testkit::tmp::TempDir::new("pgpass");
        let f = dir.join("pgpass");
        std::fs::write(
            &f,
            "# comment\nother:*:*:*:no\nh:5432:d:u:pa\\:ss\n*:*:*:*:any\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let fs = f.to_string_lossy().into_owned();
        let (cfg, _) = parse_with_env("postgres://u@h/d", &env_of(&[("PGPASSFILE", &fs)])).unwrap();
        assert_eq!(cfg.get_password(), Some(&b"pa:ss"[..]));
        let (cfg, _) =
            parse_with_env("postgres://u@h:7/d", &env_of(&[("PGPASSFILE", &fs)])).unwrap();
        assert_eq!(cfg.get_password(), Some(&b"any"[..]));
        // World-readable: ignored, as libpq does.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (cfg, _) = parse_with_env("postgres://u@h/d", &env_of(&[("PGPASSFILE", &fs)])).unwrap();
        assert_eq!(cfg.get_password(), None);
    }

    #[test]
    fn verifying_without_a_root_certificate_names_the_missing_file() {
        let s = TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: RootCert::Default,
            cert: None,
            key: None,
        };
        let e = connector_with_env(&s, &env_of(&[("HOME", "/nonexistent-home")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent-home/.postgresql/root.crt does not exist"),
            "{e}"
        );
        // require without a root certificate needs none.
        let s = TlsSettings {
            mode: SslMode::Require,
            ..s
        };
        let c = connector_with_env(&s, &env_of(&[("HOME", "/nonexistent-home")])).unwrap();
        assert_eq!(c.check, Check::None);
    }
}
