//! The URL monitor's safety matrix (the guide's list of what a URL monitor refuses), one test
//! per row, against real loopback sockets.
//! Rejected URLs must make no connection: the hostile servers count every accepted connection.
//!
//! To simulate names that resolve to *public* addresses without leaving the machine, some tests
//! inject an address policy under which `127.0.0.2` counts as public (everything else follows the
//! production rule) and a resolver with scripted answers.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cronsole::model::{Gate, MonitorSource};
use cronsole::testkit::hostile::{Behavior, HostileServer};
use cronsole::testkit::internals::addr::{AddressPolicy, public_only};
use cronsole::testkit::internals::gate::url::{UrlProbeError, UrlProbeOptions, fetch};
use cronsole::testkit::internals::gate::{GateConfig, GateOutcome, run_gate};
use cronsole::testkit::internals::proc::ProcEnv;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

const FAKE_PUBLIC: &str = "127.0.0.2";

fn fake_public_policy() -> AddressPolicy {
    let real = public_only();
    let fake: IpAddr = FAKE_PUBLIC.parse().unwrap();
    Arc::new(move |ip| if ip == fake { Ok(()) } else { real(ip) })
}

/// Answers from a script: call `i` gets `answers[min(i, len-1)]`.
struct ScriptedResolver {
    answers: Vec<Vec<SocketAddr>>,
    calls: Arc<AtomicUsize>,
}

impl Resolve for ScriptedResolver {
    fn resolve(&self, _name: Name) -> Resolving {
        let i = self.calls.fetch_add(1, Ordering::SeqCst);
        let a = self.answers[i.min(self.answers.len() - 1)].clone();
        Box::pin(async move {
            let it: Addrs = Box::new(a.into_iter());
            Ok(it)
        })
    }
}

fn opts_with(answers: Vec<Vec<SocketAddr>>) -> (UrlProbeOptions, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let opts = UrlProbeOptions {
        resolver: Arc::new(ScriptedResolver {
            answers,
            calls: calls.clone(),
        }),
        policy: fake_public_policy(),
        ..UrlProbeOptions::default()
    };
    (opts, calls)
}

async fn server() -> HostileServer {
    HostileServer::start(Behavior::Ok(b"secret\n".to_vec()))
        .await
        .unwrap()
}

async fn fake_public_server(b: Behavior) -> HostileServer {
    HostileServer::start_on(FAKE_PUBLIC.parse().unwrap(), 0, b)
        .await
        .unwrap()
}

async fn rejected(url: &str) -> UrlProbeError {
    fetch(url, false, &UrlProbeOptions::default())
        .await
        .expect_err(url)
}

fn assert_address(err: &UrlProbeError, needle: &str) {
    match err {
        UrlProbeError::Address(why) => assert!(why.contains(needle), "{why} lacks {needle}"),
        other => panic!("expected an address rejection, got {other:?}"),
    }
}

#[tokio::test]
async fn loopback_literal_is_rejected_without_connecting() {
    let s = server().await;
    let err = rejected(&format!("http://127.0.0.1:{}/", s.port())).await;
    assert_address(&err, "loopback");
    assert!(err.is_bad_url());
    assert_eq!(s.connections(), 0);
}

#[tokio::test]
async fn decimal_integer_host_is_rejected_without_connecting() {
    let s = server().await;
    let err = rejected(&format!("http://2130706433:{}/", s.port())).await;
    assert_address(&err, "127.0.0.1 is loopback");
    assert_eq!(s.connections(), 0);
}

#[tokio::test]
async fn ipv6_loopback_literal_is_rejected_without_connecting() {
    // Bind on ::1 when the host has IPv6 loopback; the point is the counter staying at zero.
    let s = match HostileServer::start_on("::1".parse().unwrap(), 0, Behavior::Ok(b"x".to_vec()))
        .await
    {
        Ok(s) => s,
        Err(_) => server().await,
    };
    let err = rejected(&format!("http://[::1]:{}/", s.port())).await;
    assert_address(&err, "loopback");
    assert_eq!(s.connections(), 0);
}

#[tokio::test]
async fn ipv4_mapped_loopback_is_rejected_without_connecting() {
    let s = server().await;
    let err = rejected(&format!("http://[::ffff:127.0.0.1]:{}/", s.port())).await;
    assert_address(&err, "IPv4-mapped");
    assert_eq!(s.connections(), 0);
}

#[tokio::test]
async fn cloud_metadata_address_is_rejected() {
    let t = Instant::now();
    let err = rejected("http://169.254.169.254/latest/meta-data").await;
    assert_address(&err, "link-local");
    // rejected before any connect: no connect timeout was waited for
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn rfc1918_literal_is_rejected() {
    let t = Instant::now();
    let err = rejected("http://10.0.0.1/").await;
    assert_address(&err, "RFC 1918");
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn localhost_name_is_rejected_at_resolution_without_connecting() {
    let s = server().await;
    let err = rejected(&format!("http://localhost:{}/", s.port())).await;
    assert_address(&err, "'localhost' resolves to");
    assert!(
        !err.is_bad_url(),
        "a name is only known bad after resolving"
    );
    assert_eq!(s.connections(), 0);
}

#[tokio::test]
async fn file_scheme_is_rejected() {
    let err = rejected("file:///etc/passwd").await;
    assert_eq!(err, UrlProbeError::Scheme("file".into()));
    assert_eq!(
        err.to_string(),
        "URL scheme 'file' is not allowed (only http and https)"
    );
}

#[tokio::test]
async fn gopher_scheme_is_rejected_without_connecting() {
    let s = server().await;
    let err = fetch(
        &format!("gopher://127.0.0.1:{}/1", s.port()),
        true,
        &UrlProbeOptions::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(err, UrlProbeError::Scheme("gopher".into()));
    assert_eq!(s.connections(), 0);
}

#[tokio::test]
async fn userinfo_is_rejected_before_any_connect() {
    assert_eq!(
        rejected("https://user:pass@example.com/").await,
        UrlProbeError::Userinfo
    );
    // Even with the address rule lifted, credentials never reach a socket.
    let s = server().await;
    let err = fetch(
        &format!("http://user:pass@127.0.0.1:{}/", s.port()),
        true,
        &UrlProbeOptions::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(err, UrlProbeError::Userinfo);
    assert_eq!(s.connections(), 0);
}

#[tokio::test]
async fn a_name_with_mixed_public_and_private_answers_is_rejected() {
    let public = fake_public_server(Behavior::Ok(b"public\n".to_vec())).await;
    let (opts, _) = opts_with(vec![vec![public.addr, "10.0.0.1:80".parse().unwrap()]]);
    let err = fetch("http://mixed.example/", false, &opts)
        .await
        .unwrap_err();
    assert_address(
        &err,
        "'mixed.example' resolves to a non-public address: 10.0.0.1 is private",
    );
    assert_eq!(public.connections(), 0, "not even the public half is used");
}

#[tokio::test]
async fn a_rebinding_resolver_cannot_redirect_the_connection() {
    let public = fake_public_server(Behavior::Ok(b"public body\n".to_vec())).await;
    let private = HostileServer::start(Behavior::Ok(b"private body\n".to_vec()))
        .await
        .unwrap();
    // First answer public, every later answer private (classic DNS rebinding).
    let (opts, calls) = opts_with(vec![vec![public.addr], vec![private.addr]]);
    let body = fetch("http://rebind.example/", false, &opts)
        .await
        .expect("the validated public address is used");
    assert_eq!(body.body, b"public body\n");
    assert_eq!(public.connections(), 1);
    assert_eq!(private.connections(), 0);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "one resolution: checked and used"
    );
    // A second probe gets the private answer and is refused, still without connecting.
    let err = fetch("http://rebind.example/", false, &opts)
        .await
        .unwrap_err();
    assert_address(&err, "loopback");
    assert_eq!(private.connections(), 0);
}

#[tokio::test]
async fn a_redirect_to_a_private_address_is_not_followed() {
    let s = fake_public_server(Behavior::Redirect(
        "http://169.254.169.254/latest/meta-data".into(),
    ))
    .await;
    let (opts, _) = opts_with(vec![vec![s.addr]]);
    let err = fetch("http://redirect.example/", false, &opts)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "redirect not followed: HTTP 302, Location: http://169.254.169.254/latest/meta-data"
    );
    assert_eq!(s.connections(), 1);
}

#[tokio::test]
async fn a_one_mebibyte_body_is_refused() {
    for content_length in [Some(1 << 20), None, Some(100_000)] {
        let s = HostileServer::start(Behavior::Huge {
            size: 1 << 20,
            content_length,
        })
        .await
        .unwrap();
        let err = fetch(&s.url("/"), true, &UrlProbeOptions::default())
            .await
            .unwrap_err();
        assert_eq!(
            err,
            UrlProbeError::TooLarge,
            "content-length {content_length:?}"
        );
        assert_eq!(err.to_string(), "response exceeded 64 KiB");
    }
}

#[tokio::test]
async fn a_lying_small_content_length_does_not_let_more_through() {
    // Claims 10 bytes, sends 1 MiB: at most the claimed 10 bytes are read as the body.
    let s = HostileServer::start(Behavior::Huge {
        size: 1 << 20,
        content_length: Some(10),
    })
    .await
    .unwrap();
    let b = fetch(&s.url("/"), true, &UrlProbeOptions::default())
        .await
        .unwrap();
    assert_eq!(b.body.len(), 10);
}

#[tokio::test]
async fn a_slow_drip_server_cannot_stall_past_the_deadline() {
    let s = HostileServer::start(Behavior::SlowDrip {
        interval: Duration::from_millis(100),
    })
    .await
    .unwrap();
    let opts = UrlProbeOptions {
        deadline: Duration::from_secs(2),
        ..UrlProbeOptions::default()
    };
    let t = Instant::now();
    let err = fetch(&s.url("/"), true, &opts).await.unwrap_err();
    let took = t.elapsed();
    assert_eq!(err, UrlProbeError::Timeout(Duration::from_secs(2)));
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[tokio::test]
async fn http_503_fails_with_the_status() {
    let s = HostileServer::start(Behavior::Status(503)).await.unwrap();
    let err = fetch(&s.url("/"), true, &UrlProbeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "HTTP 503");
}

#[tokio::test]
async fn allow_private_reaches_a_loopback_server() {
    let s = server().await;
    let b = fetch(&s.url("/status"), true, &UrlProbeOptions::default())
        .await
        .unwrap();
    assert_eq!(b.status, 200);
    assert_eq!(b.body, b"secret\n");
    assert_eq!(s.connections(), 1);
    // and by name, through the system resolver
    let b = fetch(
        &format!("http://localhost:{}/", s.port()),
        true,
        &UrlProbeOptions::default(),
    )
    .await;
    // localhost may resolve to ::1 first where the server does not listen; either way no
    // address rejection happens with allow_private.
    if let Err(e) = b {
        assert!(!matches!(e, UrlProbeError::Address(_)), "{e:?}");
    }
}

#[tokio::test]
async fn https_always_does_a_real_tls_handshake() {
    // A plain-HTTP server on the other end: the TLS handshake fails, nothing is fetched.
    let s = HostileServer::start(Behavior::Raw(
        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nplain\n".to_vec(),
    ))
    .await
    .unwrap();
    let err = fetch(
        &format!("https://127.0.0.1:{}/", s.port()),
        true,
        &UrlProbeOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, UrlProbeError::Transport(_)), "{err:?}");
}

#[tokio::test]
async fn monitor_url_gate_goes_then_reports_no_change() {
    let s = server().await;
    let gate = Gate::Monitor {
        source: MonitorSource::Url {
            url: s.url("/"),
            allow_private: true,
        },
    };
    let cfg = GateConfig::default();
    let GateOutcome::Go { monitor, .. } = run_gate(&gate, None, &cfg, &ProcEnv::default()).await
    else {
        panic!("first run goes");
    };
    let st = monitor.unwrap();
    assert_eq!(
        run_gate(&gate, Some(&st), &cfg, &ProcEnv::default()).await,
        GateOutcome::NoChange
    );
    // The same URL without allow_private fails and says why.
    let gate = Gate::Monitor {
        source: MonitorSource::Url {
            url: s.url("/"),
            allow_private: false,
        },
    };
    match run_gate(&gate, Some(&st), &cfg, &ProcEnv::default()).await {
        GateOutcome::Fail { error } => assert!(error.contains("loopback"), "{error}"),
        other => panic!("expected fail, got {other:?}"),
    }
}
