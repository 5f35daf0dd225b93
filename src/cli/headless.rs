//! The `--no-tui` front end: engine events → one line per history row on stdout and nothing else
//! (text, or JSON lines with the history row's fields); a row says whether it was delivered
//! (`delivered`, or `delivery_error=…`), while each delivery's details go to the log
//! (`<store>/logs/`); notices on stderr, so stdout stays one
//! row a line for a pipe.
//!
//! While the console draws, the same events go to the log instead ([`log_events`]): the
//! terminal belongs to the console, and `cronsole logs` (or `logs --job NAME`) read from another
//! terminal shows every run as it ends. Headless, each row is also logged once when the log is
//! the store's files; on stderr (the journal, which collects stdout too) it is not, so the
//! journal holds each row once. The engine itself logs no rows: the front end decides where
//! each row is written, once per output.
//!
//! Owns: formatting of headless output and of the console's run log lines. Must not touch: the
//! engine's state or the store.

use std::io::Write;

use tokio::sync::broadcast;

use crate::cli::args::LogFormat;
use crate::engine::Event;
use crate::model::HistoryRow;

/// One text line for a history row: time, status, job, trigger, slot, duration, cost, reason.
pub fn text_line(r: &HistoryRow) -> String {
    let mut line = format!(
        "{}  {:<9}  {}  trigger={}",
        r.finished_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        r.status.as_str(),
        sanitize_line(&r.job),
        r.trigger.as_str(),
    );
    if let Some(slot) = r.slot {
        line.push_str(&format!("  slot={}", crate::when::rfc3339(slot)));
    }
    if let Some(n) = r.slots_count {
        line.push_str(&format!("  slots={n}"));
    }
    if let (Some(j), Some(id)) = (&r.parent_job, r.parent_run_id) {
        line.push_str(&format!("  parent={}/{id}", sanitize_line(j)));
    }
    line.push_str(&format!("  {}ms", r.duration_ms));
    if r.cost_usd > 0.0 || r.model.is_some() {
        line.push_str(&format!("  {}", crate::cost::usd(r.cost_usd)));
    }
    if r.stale_lease {
        line.push_str("  stale_lease");
    }
    if let Some(step) = &r.clock_stepped {
        line.push_str(&format!("  clock stepped {}", sanitize_line(step)));
    }
    if let Some(reason) = &r.reason {
        line.push_str(&format!("  reason={}", sanitize_line(reason)));
    }
    if let Some(err) = &r.error {
        line.push_str(&format!("  error={}", sanitize_line(err)));
    }
    if r.delivered {
        line.push_str("  delivered");
    }
    if let Some(e) = &r.delivery_error {
        line.push_str(&format!("  delivery_error={}", sanitize_line(e)));
    }
    line
}

/// Fold text onto one printable line by the one inert-text policy (`cronsole::text`): unsafe
/// characters (incl. ESC, bidi overrides, zero-width) are shown escaped, so output from commands,
/// pages or models cannot drive the terminal or split a log line. Cut at 500 characters.
pub fn sanitize_line(s: &str) -> String {
    let cut: String = s.chars().take(500).collect();
    let mut out = crate::text::visible_line(&cut).into_owned();
    if s.chars().nth(500).is_some() {
        out.push('…');
    }
    out
}

/// The log line of one history row: [`text_line`] without its time (the log line has its
/// own) and with the job as the `job` field, so `cronsole logs --job NAME` finds it.
fn log_row(r: &HistoryRow) {
    let line = text_line(r);
    // "TIME  STATUS  JOB  rest": the status and the rest, the job as a field.
    let status = r.status.as_str();
    let rest = line
        .split_once("  trigger=")
        .map_or(String::new(), |(_, rest)| format!("trigger={rest}"));
    let job = sanitize_line(&r.job);
    match r.status {
        crate::model::Status::Failed | crate::model::Status::Abandoned => {
            tracing::warn!(target: "cronsole::run", job = %job, "{status} {rest}")
        }
        _ => tracing::info!(target: "cronsole::run", job = %job, "{status} {rest}"),
    }
}

/// Log events until the channel closes (the engine stopped): what the headless printer puts
/// on stdout, for the log while the console owns the terminal — one line per history row,
/// each delivery, each engine notice.
pub async fn log_events(mut events: broadcast::Receiver<Event>) {
    loop {
        match events.recv().await {
            Ok(Event::Row(row)) => log_row(&row),
            Ok(Event::Delivered { job, sink, text }) => tracing::info!(
                job = %sanitize_line(&job),
                sink = %sanitize_line(&sink),
                "delivered: {}",
                sanitize_line(&text)
            ),
            Ok(Event::Notice(n)) => tracing::warn!("{}", sanitize_line(&n)),
            Ok(Event::RunStarted { job, .. }) => {
                tracing::debug!(job = %sanitize_line(&job), "run started")
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(
                    "the log fell behind: {n} event(s) not logged (see `cronsole history`)"
                )
            }
            Err(broadcast::error::RecvError::Closed) => break,
        }
    }
}

/// Print events until the channel closes (the engine stopped); with `log_rows`, each row is
/// also logged once (the log is the store's files, which `cronsole logs --job NAME` reads).
pub async fn print_events(
    mut events: broadcast::Receiver<Event>,
    format: LogFormat,
    log_rows: bool,
    mut out: impl Write + Send,
    mut err: impl Write + Send,
) {
    loop {
        match events.recv().await {
            Ok(Event::Row(row)) => {
                if log_rows {
                    log_row(&row);
                }
                let line = match format {
                    LogFormat::Text => text_line(&row),
                    LogFormat::Json => match crate::text::to_json(&row) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "history row did not serialise");
                            continue;
                        }
                    },
                };
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            Ok(Event::Delivered { job, sink, text }) => {
                // Details to the log; stdout stays one line per history row.
                tracing::info!(
                    job = %sanitize_line(&job),
                    sink = %sanitize_line(&sink),
                    "delivered: {}",
                    sanitize_line(&text)
                );
            }
            Ok(Event::Notice(n)) => {
                let _ = writeln!(err, "cronsole: {}", sanitize_line(&n));
            }
            Ok(Event::RunStarted { .. }) => {}
            Err(broadcast::error::RecvError::Lagged(n)) => {
                let _ = writeln!(
                    err,
                    "cronsole: output fell behind; {n} event(s) not printed (see `cronsole history`)"
                );
            }
            Err(broadcast::error::RecvError::Closed) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Status, Trigger};

    #[test]
    fn text_line_is_one_sanitised_line() {
        let t = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let mut r = HistoryRow::new(
            "job\x1b[31m",
            Status::Failed,
            Trigger::Schedule,
            Some(t),
            "o",
            t,
        );
        r.error = Some("boom\nsecond line\x07".into());
        let line = text_line(&r);
        assert!(!line.contains('\n'));
        assert!(!line.contains('\x1b'));
        assert!(!line.contains('\x07'));
        assert!(line.contains("failed"));
        assert!(line.contains("boom\\nsecond line"));
    }

    #[test]
    fn text_line_says_whether_the_row_was_delivered() {
        let t = chrono::Utc::now();
        let mut r = HistoryRow::new("a", Status::Succeeded, Trigger::Schedule, None, "o", t);
        assert!(!text_line(&r).contains("delivered"));
        r.delivered = true;
        assert!(text_line(&r).ends_with("  delivered"), "{}", text_line(&r));
    }

    #[test]
    fn text_line_names_a_chained_runs_parent() {
        let t = chrono::Utc::now();
        let mut r = HistoryRow::new("b", Status::Succeeded, Trigger::Chain, None, "o", t);
        let id = uuid::Uuid::from_u128(7);
        r.parent_job = Some("a".into());
        r.parent_run_id = Some(id);
        let line = text_line(&r);
        assert!(line.contains("trigger=chain"), "{line}");
        assert!(line.contains(&format!("parent=a/{id}")), "{line}");
    }

    #[tokio::test]
    async fn stdout_carries_history_rows_only() {
        let (tx, rx) = broadcast::channel(8);
        let t = chrono::Utc::now();
        tx.send(Event::Delivered {
            job: "a".into(),
            sink: "file:/tmp/x".into(),
            text: "hello".into(),
        })
        .unwrap();
        let mut row = HistoryRow::new("a", Status::Succeeded, Trigger::Schedule, None, "o", t);
        row.delivered = true;
        tx.send(Event::Row(row)).unwrap();
        drop(tx);
        let mut out = Vec::new();
        print_events(rx, LogFormat::Text, false, &mut out, std::io::sink()).await;
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains("succeeded") && text.contains("delivered"),
            "{text}"
        );
        assert!(!text.contains("hello"), "{text}");
    }

    #[tokio::test]
    async fn json_lines_carry_the_history_fields() {
        let (tx, rx) = broadcast::channel(8);
        let t = chrono::Utc::now();
        tx.send(Event::Row(HistoryRow::new(
            "a",
            Status::NoChange,
            Trigger::Manual,
            None,
            "o",
            t,
        )))
        .unwrap();
        drop(tx);
        let mut out = Vec::new();
        print_events(rx, LogFormat::Json, false, &mut out, std::io::sink()).await;
        let v: serde_json::Value =
            serde_json::from_slice(out.split(|b| *b == b'\n').next().unwrap()).unwrap();
        for k in [
            "run_id",
            "job",
            "status",
            "slot",
            "trigger",
            "started_at",
            "finished_at",
            "duration_ms",
            "attempts",
            "owner",
            "reason",
            "error",
            "result",
            "diff",
            "model",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "delivered",
            "delivery_error",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["status"], "no_change");
    }
}
