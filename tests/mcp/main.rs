//! The MCP client against real MCP servers, one test binary: the reference servers of both
//! protocol eras (`client`) and hostile ones (`hostile`).
//!
//! One binary rather than one per topic because each test binary links the whole library and its
//! dependencies after every library change. Run one topic with `cargo test --test mcp hostile::`.
#![allow(clippy::unwrap_used)] // test code

mod client;
mod hostile;

use cronsole::testkit::internals::action::tools::ToolError;
use cronsole::testkit::internals::action::tools::mcp::{self, McpSource, Session};

/// A stdio server as a plain child of the test, killed with the session (its guard): the
/// session needs only the pipes.
async fn stdio(argv: &[String], s: Session) -> Result<McpSource, ToolError> {
    let mut child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let out = child.stdout.take().unwrap();
    let inp = child.stdin.take().unwrap();
    let s = Session {
        guard: Some(Box::new(child)),
        ..s
    };
    mcp::connect_stdio(out, inp, s).await
}
