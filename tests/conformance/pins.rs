//! Conformance cases for tool pins, for both stores: the first pin of a tool wins for every
//! owner, reads filter by server, `--accept` replaces one server's pins only.

use std::sync::Arc;

use cronsole::model::ToolPin;
use serde_json::json;

use super::{Factory, t};

fn pin(server: &str, tool: &str, hash: &str) -> ToolPin {
    ToolPin {
        server: server.into(),
        tool: tool.into(),
        hash: hash.into(),
        definition: json!({"name": tool, "description": format!("v{hash}"),
                           "input_schema": {"type": "object"}}),
        pinned_at: t(1000),
    }
}

pub fn tool_pins_are_kept_by_the_first_writer_and_replaced_only_by_accept(f: Factory) {
    let s = f();
    assert_eq!(s.tool_pins(&[]).unwrap(), vec![]);
    let held = s
        .pin_tools(&[pin("files", "read", "a1"), pin("files", "write", "b1")])
        .unwrap();
    assert_eq!(
        held,
        vec![pin("files", "read", "a1"), pin("files", "write", "b1")]
    );
    // A second first use with another definition keeps the stored pin and returns it.
    let held = s
        .pin_tools(&[pin("files", "write", "b2"), pin("search", "query", "c1")])
        .unwrap();
    assert_eq!(
        held,
        vec![pin("files", "write", "b1"), pin("search", "query", "c1")]
    );
    assert_eq!(
        s.tool_pins(&["search".into()]).unwrap(),
        vec![pin("search", "query", "c1")]
    );
    let all = s.tool_pins(&[]).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].definition["description"], "va1");
    // Accept replaces that server's pins, whatever they were, and no other server's.
    let n = s
        .accept_tools(
            "files",
            &[pin("files", "write", "b2"), pin("search", "x", "zz")],
        )
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(
        s.tool_pins(&[]).unwrap(),
        vec![pin("files", "write", "b2"), pin("search", "query", "c1")]
    );
}

pub fn concurrent_first_uses_agree_on_one_pin(f: Factory) {
    let s = f();
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                s.pin_tools(&[pin("files", "read", &format!("h{i}"))])
                    .unwrap()
            })
        })
        .collect();
    let seen: Vec<Vec<ToolPin>> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    let stored = s.tool_pins(&[]).unwrap();
    assert_eq!(stored.len(), 1);
    for held in seen {
        assert_eq!(held, stored, "every owner sees the winner's pin");
    }
}
