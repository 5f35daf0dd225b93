//! Draw the console over the fixed test snapshot, with no engine and no store: for trying the
//! keys by hand and for screenshots. Commands sent by the console are printed after it exits.
//!
//! Run: `cargo run --example console_fixture` (needs a terminal).

use std::sync::Arc;

use cronsole::clock::ManualClock;
use cronsole::engine::Command;
use cronsole::tui::{self, ConsoleDeps, testdata};
use tokio::sync::{broadcast, mpsc, watch};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (snap, now) = testdata::fixed();
    let recent = snap.recent.clone();
    let (_snap_tx, snapshots) = watch::channel(Arc::new(snap));
    let (_ev_tx, events) = broadcast::channel(16);
    let (commands, mut cmd_rx) = mpsc::channel::<Command>(16);
    let deps = ConsoleDeps {
        snapshots,
        events,
        commands,
        store: Arc::new(testdata::HistoryOnlyStore(recent)),
        clock: Arc::new(ManualClock::new(now)),
        stop: tokio_util::sync::CancellationToken::new(),
        dry_run: None,
        warnings: Vec::new(),
        health: None,
        key_env: None,
    };
    tui::run(deps).await?;
    while let Ok(c) = cmd_rx.try_recv() {
        println!("sent: {c:?}");
    }
    Ok(())
}
