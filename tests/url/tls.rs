//! TLS verification of the URL monitor (full hostname and CA verification, never
//! switched off), offline:
//! a loopback rustls server presents a leaf for `localhost` signed by a throwaway test CA
//! (`tests/data/tls`). Untrusted CA → failed; trusted CA → fetched; wrong name → failed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cronsole::testkit::internals::gate::url::{UrlProbeError, UrlProbeOptions, fetch};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const CA: &[u8] = include_bytes!("../data/tls/ca.der");
const LEAF: &[u8] = include_bytes!("../data/tls/leaf.der");
const LEAF_KEY: &[u8] = include_bytes!("../data/tls/leaf.key.der");

struct TlsServer {
    port: u16,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tls_server() -> TlsServer {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(LEAF.to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(LEAF_KEY.to_vec())),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tls
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nsecure\n")
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    TlsServer {
        port,
        accepted,
        task,
    }
}

#[tokio::test]
async fn an_untrusted_certificate_fails() {
    let s = tls_server().await;
    let err = fetch(
        &format!("https://localhost:{}/", s.port),
        true,
        &UrlProbeOptions::default(),
    )
    .await
    .unwrap_err();
    match err {
        UrlProbeError::Transport(msg) => {
            assert!(msg.to_lowercase().contains("certificate"), "{msg}")
        }
        other => panic!("expected a TLS failure, got {other:?}"),
    }
    assert_eq!(s.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_trusted_certificate_for_the_right_name_is_fetched() {
    let s = tls_server().await;
    let opts = UrlProbeOptions {
        extra_roots_der: vec![CA.to_vec()],
        ..UrlProbeOptions::default()
    };
    // (`localhost` may also resolve to ::1, where nothing listens; the client falls back to the
    // next address, which is 127.0.0.1.)
    let body = fetch(&format!("https://localhost:{}/", s.port), true, &opts)
        .await
        .unwrap();
    assert_eq!(body.body, b"secure\n");
}

#[tokio::test]
async fn a_trusted_certificate_for_another_name_fails() {
    let s = tls_server().await;
    let opts = UrlProbeOptions {
        extra_roots_der: vec![CA.to_vec()],
        ..UrlProbeOptions::default()
    };
    // The leaf names localhost and tls.example, not the IP address.
    let err = fetch(&format!("https://127.0.0.1:{}/", s.port), true, &opts)
        .await
        .unwrap_err();
    match err {
        UrlProbeError::Transport(msg) => {
            assert!(msg.to_lowercase().contains("certificate"), "{msg}")
        }
        other => panic!("expected a TLS failure, got {other:?}"),
    }
}
