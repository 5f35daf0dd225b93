//! Hostile MCP servers (tests/mcp_servers/hostile.py): one that hangs, crashes mid-call, floods,
//! answers with megabytes, changes a definition mid-run, cries "changed" without changing
//! anything, asks for sampling, or pages forever. Each is bounded, named and recorded.

use std::sync::Arc;
use std::time::Duration;

use cronsole::testkit::internals::action::tools::mcp::{Era, McpSource, Session};
use cronsole::testkit::internals::action::tools::{Content, ToolError, ToolSource};
use cronsole::testkit::internals::text::Secrets;
use cronsole::testkit::mcp::TestServers;
use cronsole::testkit::wait::wait_until_async;
use serde_json::json;

use super::stdio;

async fn hostile(
    servers: &TestServers,
    mode: &str,
    timeout: Duration,
) -> Result<McpSource, ToolError> {
    let argv = servers.py_argv("hostile.py", &[mode]);
    let s = Session {
        name: "evil".to_string(),
        era: Era::Pinned("2025-11-25".into()),
        timeout,
        secrets: Arc::new(Secrets::new([])),
        own: Default::default(),
        guard: None,
        stderr: None,
    };
    stdio(&argv, s).await
}

const T: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_servers_are_bounded_named_and_recorded() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    // Hangs at the handshake: unreachable, within the bound.
    let started = std::time::Instant::now();
    let e = hostile(&servers, "hang", Duration::from_secs(2))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ToolError::Unreachable { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // Crashes mid-call: the call fails, naming the server.
    let s = hostile(&servers, "crash", T).await.unwrap();
    s.list().await.unwrap();
    let e = s.call("a", json!({}), T).await.unwrap_err();
    assert!(
        matches!(e, ToolError::Protocol { ref source_name, .. } if source_name == "evil"),
        "{e}"
    );
    s.close().await;

    // One line over the message bound: dropped, the call times out, nothing is held.
    let s = hostile(&servers, "flood", T).await.unwrap();
    s.list().await.unwrap();
    let e = s
        .call("a", json!({}), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(e, ToolError::Timeout(Duration::from_secs(5)));
    s.close().await;

    // Megabytes under the bound come through whole (the loop bounds what the model sees).
    let s = hostile(&servers, "big", T).await.unwrap();
    s.list().await.unwrap();
    let out = s.call("a", json!({}), T).await.unwrap();
    let Content::Text { text } = &out.content[0] else {
        panic!()
    };
    assert_eq!(text.len(), 3 * 1024 * 1024);
    s.close().await;

    // Sampling is refused with an error, and the refusal is recorded.
    let s = hostile(&servers, "sampling", T).await.unwrap();
    s.list().await.unwrap();
    let out = s.call("a", json!({}), T).await.unwrap();
    assert_eq!(
        out.content,
        vec![Content::Text {
            text: "sampling refused".into()
        }]
    );
    assert_eq!(
        s.take_events(),
        vec!["refused the server's sampling request".to_string()]
    );
    assert!(s.take_events().is_empty());
    s.close().await;

    // A list that pages forever is refused.
    let s = hostile(&servers, "cursor", T).await.unwrap();
    let e = s.list().await.unwrap_err();
    assert!(e.to_string().contains("repeats a page cursor"), "{e}");
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_real_change_of_a_listed_definition_flags_the_source() {
    let Some(servers) = TestServers::find() else {
        return;
    };
    // "Changed!" with nothing changed: never flagged.
    let s = hostile(&servers, "notify", T).await.unwrap();
    s.list().await.unwrap();
    for _ in 0..3 {
        s.call("a", json!({}), T).await.unwrap();
    }
    // Wait for the client's own progress: the server counts the lists it was asked for (the
    // first one, then a re-list after a notice); the comparison follows each answer at once,
    // and one more round trip lets it finish.
    let lists = || async {
        let out = s.call("b", json!({}), T).await.unwrap();
        let Content::Text { text } = &out.content[0] else {
            panic!("{out:?}")
        };
        text.parse::<u32>().unwrap()
    };
    let start = std::time::Instant::now();
    while lists().await < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no re-list after a notice"
        );
    }
    lists().await;
    assert!(!s.list_changed());
    s.close().await;

    // A definition that changes mid-run flags the source.
    let s = hostile(&servers, "change", T).await.unwrap();
    s.list().await.unwrap();
    assert!(!s.list_changed());
    s.call("a", json!({}), T).await.unwrap();
    wait_until_async(
        "the changed definition is seen",
        Duration::from_secs(10),
        || s.list_changed(),
    )
    .await;
    // Listing again takes the new definitions as the baseline.
    s.list().await.unwrap();
    assert!(!s.list_changed());
    s.close().await;
}
