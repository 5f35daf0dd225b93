//! The MCP client against real servers, really started: the Python SDK's server (current era)
//! over streamable HTTP on loopback and over stdio, and `@modelcontextprotocol/server-everything`
//! (older era, `initialize` handshake) over stdio. Listing, calls, `isError`, structured and
//! non-text content, timeouts with cancellation, and the era each session agreed on.
//!
//! The stdio servers here are plain children of the test (the session only needs the pipes);
//! the runs' own stdio servers start under the supervisor (see `tools_process.rs`).

use std::sync::Arc;
use std::time::Duration;

use cronsole::testkit::internals::action::tools::mcp::{self, Era, McpSource, Session};
use cronsole::testkit::internals::action::tools::{Content, ToolError, ToolSource};
use cronsole::testkit::internals::text::Secrets;
use cronsole::testkit::mcp::TestServers;
use serde_json::json;

use super::stdio;

fn session(name: &str, era: Era) -> Session {
    Session {
        name: name.to_string(),
        era,
        timeout: Duration::from_secs(60),
        secrets: Arc::new(Secrets::new(["sup3r-s3cret-value".to_string()])),
        own: Default::default(),
        guard: None,
        stderr: None,
    }
}

async fn exercise(src: &McpSource) {
    let tools = src.list().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for want in ["add", "echo", "env", "fail", "picture", "slow"] {
        assert!(names.contains(&want), "{names:?}");
    }
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    assert_eq!(echo.description, "Returns the text it was given.");
    assert_eq!(echo.input_schema["required"], json!(["text"]));

    let t = Duration::from_secs(30);
    let out = src.call("echo", json!({"text": "hello"}), t).await.unwrap();
    assert!(!out.is_error);
    assert_eq!(
        out.content,
        vec![Content::Text {
            text: "hello".into()
        }]
    );
    let out = src.call("add", json!({"a": 2, "b": 40}), t).await.unwrap();
    assert_eq!(out.structured, Some(json!({"sum": 42})), "{out:?}");
    let out = src
        .call("fail", json!({"why": "on purpose"}), t)
        .await
        .unwrap();
    assert!(out.is_error, "{out:?}");
    let out = src.call("picture", json!({}), t).await.unwrap();
    match &out.content[..] {
        [
            Content::Blob {
                kind,
                mime,
                size,
                sha256,
            },
        ] => {
            assert_eq!((kind.as_str(), mime.as_str()), ("image", "image/png"));
            assert_eq!(*size, 70, "the decoded PNG's size");
            assert_eq!(sha256.len(), 64);
        }
        other => panic!("{other:?}"),
    }
    // A call that outlives its timeout is cancelled; the session goes on.
    let started = std::time::Instant::now();
    let e = src
        .call("slow", json!({"seconds": 30}), Duration::from_millis(500))
        .await
        .unwrap_err();
    assert_eq!(e, ToolError::Timeout(Duration::from_millis(500)));
    assert!(started.elapsed() < Duration::from_secs(10));
    let out = src
        .call("echo", json!({"text": "still here"}), t)
        .await
        .unwrap();
    assert!(!out.is_error);
    assert!(src.take_events().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_server_over_streamable_http_speaks_the_current_era() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let http = servers.py_http();
    let src = mcp::connect_http(&http.url(), &[], session("py", Era::Auto))
        .await
        .unwrap();
    assert_eq!(src.protocol_version().as_deref(), Some("2026-07-28"));
    exercise(&src).await;
    src.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_server_over_stdio_in_both_eras() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let src = stdio(
        &servers.py_stdio_argv(),
        session("py", Era::Pinned("2026-07-28".into())),
    )
    .await
    .unwrap();
    assert_eq!(src.protocol_version().as_deref(), Some("2026-07-28"));
    exercise(&src).await;
    src.close().await;
    // Unpinned, the era depends on how fast the interpreter starts: discovery when it answers
    // within the SDK's 10 s, else the handshake, the late discovery answer dropped. Either
    // way the session works.
    let src = stdio(&servers.py_stdio_argv(), session("py", Era::Auto))
        .await
        .unwrap();
    let v = src.protocol_version();
    assert!(
        matches!(v.as_deref(), Some("2026-07-28" | "2025-11-25")),
        "{v:?}"
    );
    exercise(&src).await;
    src.close().await;
    // The older era, chosen from the client side.
    let src = stdio(
        &servers.py_stdio_argv(),
        session("py", Era::Pinned("2025-11-25".into())),
    )
    .await
    .unwrap();
    assert_eq!(src.protocol_version().as_deref(), Some("2025-11-25"));
    exercise(&src).await;
    src.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio_speaks_the_older_era() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    let src = stdio(
        &servers.everything_argv(),
        session("everything", Era::Pinned("2025-11-25".into())),
    )
    .await
    .unwrap();
    assert_eq!(src.protocol_version().as_deref(), Some("2025-11-25"));
    let tools = src.list().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    let out = src
        .call("echo", json!({"message": "hi"}), Duration::from_secs(30))
        .await
        .unwrap();
    let Content::Text { text } = &out.content[0] else {
        panic!("{out:?}");
    };
    assert!(text.contains("hi"), "{text}");
    src.close().await;
    // Without a pinned era the client asks for discovery first and falls back.
    let src = stdio(&servers.everything_argv(), session("everything", Era::Auto))
        .await
        .unwrap();
    assert_eq!(src.protocol_version().as_deref(), Some("2025-11-25"));
    src.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_http_server_is_named_and_secrets_never_show() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut s = session("search", Era::Auto);
    s.timeout = Duration::from_secs(5);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let headers = [(
        "Authorization".to_string(),
        "sup3r-s3cret-value".to_string(),
    )];
    let e = match mcp::connect_http(&url, &headers, s).await {
        Err(e) => e,
        Ok(_) => panic!("connected to nothing"),
    };
    let text = e.to_string();
    assert!(
        matches!(e, ToolError::Unreachable { ref source_name, .. } if source_name == "search"),
        "{text}"
    );
    assert!(!text.contains("sup3r-s3cret-value"), "{text}");
}
