//! Delivery sinks against an in-process loopback server and a temp directory:
//! payload shapes per webhook format, file sink lines, and failures as `delivery_error` text.
#![allow(clippy::unwrap_used)] // test code

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronsole::model::{HistoryRow, SinkDef, Status, Trigger, WebhookFormat};
use cronsole::testkit::http::{Response, TestServer};
use cronsole::testkit::internals::action::llm::{HttpOptions, http_client};
use cronsole::testkit::internals::deliver::{Message, deliver, deliver_all};

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-29T12:00:05Z")
        .unwrap()
        .to_utc()
}

fn client() -> reqwest::Client {
    http_client(&HttpOptions {
        system_proxy: false,
        ..HttpOptions::default()
    })
    .unwrap()
}

fn row(result: &str) -> HistoryRow {
    let t = DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
        .unwrap()
        .to_utc();
    let mut r = HistoryRow::new(
        "disk-watch",
        Status::Succeeded,
        Trigger::Schedule,
        Some(t),
        "host:1:abcd1234",
        t,
    );
    r.result = Some(result.into());
    r.model = Some("gpt-4o-mini".into());
    r.input_tokens = 12;
    r.output_tokens = 3;
    r.cost_usd = 0.0001;
    r
}

fn hook(name: &str, url: String, format: WebhookFormat) -> SinkDef {
    SinkDef::Webhook {
        name: name.into(),
        url,
        format,
    }
}

const T: Duration = Duration::from_secs(5);

#[tokio::test]
async fn webhook_payloads_per_format() {
    let srv = TestServer::start(|_| Response::new(204)).await.unwrap();
    let c = client();
    let msg = Message::result(&row("disk at 91%"));
    for (path, fmt) in [
        ("/json", WebhookFormat::Json),
        ("/slack", WebhookFormat::Slack),
        ("/discord", WebhookFormat::Discord),
    ] {
        let sink = hook(path, format!("{}{path}", srv.url()), fmt);
        deliver(&c, &sink, &msg, T, now()).await.unwrap();
    }
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 3);
    for r in &reqs {
        assert_eq!(r.method, "POST");
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    let j = reqs[0].json().unwrap();
    assert_eq!(j["kind"], "result");
    assert_eq!(j["job"], "disk-watch");
    assert_eq!(j["status"], "succeeded");
    assert_eq!(j["slot"], "2026-11-29T12:00:00Z");
    assert_eq!(j["result"], "disk at 91%");
    assert_eq!(j["model"], "gpt-4o-mini");
    assert_eq!(j["input_tokens"], 12);
    assert_eq!(j["output_tokens"], 3);
    assert_eq!(j["cost_usd"], 0.0001);
    assert_eq!(j["sent_at"], "2026-11-29T12:00:05Z");
    assert!(j.get("run_id").is_some());
    assert_eq!(
        reqs[1].json().unwrap(),
        serde_json::json!({"text": "[disk-watch] disk at 91%"})
    );
    // Discord is told no mention may ping: a job's output must not page a whole server.
    assert_eq!(
        reqs[2].json().unwrap(),
        serde_json::json!({"content": "[disk-watch] disk at 91%", "allowed_mentions": {"parse": []}})
    );
}

#[tokio::test]
async fn chat_sinks_receive_untrusted_text_inert() {
    // A monitored page or a model reply trying to ping everyone and disguise a link.
    let srv = TestServer::start(|_| Response::new(200)).await.unwrap();
    let c = client();
    let msg = Message::result(&row(
        "<!channel> @everyone <http://evil|your bank> a&b \u{202e}gnp.exe",
    ));
    for (path, fmt) in [
        ("/slack", WebhookFormat::Slack),
        ("/discord", WebhookFormat::Discord),
        ("/json", WebhookFormat::Json),
    ] {
        let sink = hook(path, format!("{}{path}", srv.url()), fmt);
        deliver(&c, &sink, &msg, T, now()).await.unwrap();
    }
    let reqs = srv.requests();
    let slack = reqs[0].json().unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        slack,
        "[disk-watch] &lt;!channel&gt; @everyone &lt;http://evil|your bank&gt; a&amp;b \\u{202e}gnp.exe"
    );
    let discord = reqs[1].json().unwrap();
    assert_eq!(
        discord["allowed_mentions"],
        serde_json::json!({"parse": []})
    );
    assert!(!discord["content"].as_str().unwrap().contains('\u{202e}'));
    // JSON stays raw: machines read it.
    assert_eq!(
        reqs[2].json().unwrap()["result"],
        "<!channel> @everyone <http://evil|your bank> a&b \u{202e}gnp.exe"
    );
}

#[tokio::test]
async fn discord_never_gets_more_than_2000_chars() {
    let srv = TestServer::start(|_| Response::new(204)).await.unwrap();
    let msg = Message::result(&row(&"x".repeat(10_000)));
    let sink = hook("d", format!("{}/d", srv.url()), WebhookFormat::Discord);
    deliver(&client(), &sink, &msg, T, now()).await.unwrap();
    let content = srv.requests()[0].json().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(content.chars().count(), 2000);
    assert!(content.ends_with("…[truncated]"));
}

#[tokio::test]
async fn file_sink_appends_json_lines_creating_directories() {
    let dir = support::tempdir("deliver");
    let path = dir.join("nested/deeper/out.jsonl");
    let sink = SinkDef::File {
        name: "log".into(),
        path: path.to_string_lossy().into_owned(),
    };
    let c = client();
    deliver(&c, &sink, &Message::result(&row("first")), T, now())
        .await
        .unwrap();
    let mut failed = row("");
    failed.status = Status::Failed;
    failed.error = Some("boom".into());
    deliver(&c, &sink, &Message::alert(&failed, 1), T, now())
        .await
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(text.ends_with('\n'));
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["kind"], "result");
    assert_eq!(lines[0]["result"], "first");
    assert_eq!(lines[1]["kind"], "alert");
    assert_eq!(lines[1]["status"], "failed");
    assert_eq!(lines[1]["text"], "ALERT: disk-watch failed (1 time): boom");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn failing_sinks_return_error_text_naming_the_sink_not_the_url() {
    let srv = TestServer::start(|_| Response::text(500, "slack is down"))
        .await
        .unwrap();
    let dead_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let slow = TestServer::start(|_| Response::new(200).delay(Duration::from_secs(30)))
        .await
        .unwrap();
    let secret_path = "/services/T000/B000/SECRETTOKEN";
    let mut sinks = BTreeMap::new();
    for s in [
        hook(
            "five-hundred",
            format!("{}{secret_path}", srv.url()),
            WebhookFormat::Slack,
        ),
        hook(
            "refused",
            format!("http://127.0.0.1:{dead_port}{secret_path}"),
            WebhookFormat::Json,
        ),
        hook(
            "slow",
            format!("{}{secret_path}", slow.url()),
            WebhookFormat::Discord,
        ),
    ] {
        sinks.insert(s.name().to_string(), s);
    }
    let c = client();
    let msg = Message::result(&row("hello"));
    let names: Vec<String> = ["five-hundred", "refused", "slow", "missing"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let rep = deliver_all(&c, &sinks, &names, &msg, Duration::from_millis(300), now()).await;
    assert!(!rep.delivered);
    assert!(rep.ok.is_empty());
    let err = rep.error.unwrap();
    let parts: Vec<&str> = err.split("; ").collect();
    assert_eq!(parts.len(), 4, "{err}");
    assert_eq!(parts[0], "five-hundred: HTTP 500: slack is down");
    assert!(parts[1].starts_with("refused: "), "{err}");
    assert!(parts[1].to_lowercase().contains("connect"), "{err}");
    assert!(parts[2].starts_with("slow: no answer within 0.3s"), "{err}");
    assert_eq!(parts[3], "missing: no such sink in delivery:");
    assert!(!err.contains("SECRETTOKEN"), "webhook URL leaked: {err}");

    // An invalid URL is a clear error too.
    let e = deliver(
        &c,
        &hook("bad", "ftp://x/y".into(), WebhookFormat::Json),
        &msg,
        T,
        now(),
    )
    .await
    .unwrap_err();
    assert_eq!(e, "invalid webhook URL: scheme 'ftp' is not http or https");

    // All sinks succeeding → delivered; no sinks → not delivered, no error.
    let ok_srv = TestServer::start(|_| Response::new(200)).await.unwrap();
    let mut ok = BTreeMap::new();
    ok.insert(
        "a".to_string(),
        hook("a", ok_srv.url(), WebhookFormat::Slack),
    );
    let rep = deliver_all(&c, &ok, &["a".to_string()], &msg, T, now()).await;
    assert!(rep.delivered);
    assert_eq!(rep.error, None);
    assert_eq!(rep.ok, vec!["a".to_string()]);
    let rep = deliver_all(&c, &ok, &[], &msg, T, now()).await;
    assert!(!rep.delivered);
    assert_eq!(rep.error, None);
}
