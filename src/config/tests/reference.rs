//! The guide's jobs-file reference against the checker's own key tables: every key the checker
//! accepts is named in the section of `docs/guide/jobs-file.md` that describes it, and every
//! key a reference table lists is one the checker accepts. A key added to the code without a
//! line in the reference (or a line left behind when a key goes) fails here, so the page an
//! operator reads cannot drift from what `validate` accepts.

use super::super::check::{
    AFTER_KEYS, AGENT_KEYS, BUDGET_KEYS, CALENDAR_KEYS, COMMAND_TOOL_KEYS, DEFAULT_KEYS, JOB_KEYS,
    MCP_KEYS, MONITOR_KEYS, PRICE_KEYS, SCHEDULE_KEYS, SINK_KEYS, TOP_KEYS,
};

const JOBS_FILE: &str = include_str!("../../../docs/guide/jobs-file.md");
const SCHEDULES: &str = include_str!("../../../docs/guide/schedules.md");

/// The text of the `## …` section whose heading line is `heading`, up to the next `## `.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading:?} in the guide"));
    let body = &doc[start + heading.len() + 2..];
    match body.find("\n## ") {
        Some(end) => &body[..end],
        None => body,
    }
}

/// `key` is named in `text`: in backticks (a table or prose), or as a YAML key (`key:` after
/// a space, `{` or the start of a line) in an example.
fn names(text: &str, key: &str) -> bool {
    if text.contains(&format!("`{key}`")) {
        return true;
    }
    let written = format!("{key}:");
    text.match_indices(&written).any(|(at, _)| {
        text[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c == ' ' || c == '{' || c == '\n' || c == ',')
    })
}

/// Where each key table of the checker is described.
fn sections() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    let tools: Vec<&str> = MCP_KEYS.iter().chain(COMMAND_TOOL_KEYS).copied().collect();
    let jobs: Vec<&str> = JOB_KEYS
        .iter()
        .chain(MONITOR_KEYS)
        .chain(AFTER_KEYS)
        .copied()
        .collect();
    vec![
        (JOBS_FILE, "## The sections", TOP_KEYS.to_vec()),
        (JOBS_FILE, "## `defaults:`", DEFAULT_KEYS.to_vec()),
        (JOBS_FILE, "## `jobs:`", jobs),
        (JOBS_FILE, "## `budget:`", BUDGET_KEYS.to_vec()),
        (JOBS_FILE, "## `pricing:`", PRICE_KEYS.to_vec()),
        (JOBS_FILE, "## `agents:`", AGENT_KEYS.to_vec()),
        (JOBS_FILE, "## `mcp_servers:` and `tools:`", tools),
        (JOBS_FILE, "## `delivery:`", SINK_KEYS.to_vec()),
        (JOBS_FILE, "## `calendars:`", CALENDAR_KEYS.to_vec()),
        (SCHEDULES, "## Kinds", SCHEDULE_KEYS.to_vec()),
    ]
}

#[test]
fn every_accepted_key_is_in_the_reference() {
    let mut missing = Vec::new();
    for (doc, heading, keys) in sections() {
        let text = section(doc, heading);
        missing.extend(
            keys.iter()
                .filter(|k| !names(text, k))
                .map(|k| format!("{heading}: `{k}`")),
        );
    }
    assert!(
        missing.is_empty(),
        "keys the jobs file accepts but the guide (docs/guide/jobs-file.md, schedules.md) does \
         not describe in their section:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn every_key_a_reference_table_lists_is_accepted() {
    let mut stale = Vec::new();
    for (doc, heading, keys) in sections() {
        let mut in_table = false;
        for line in section(doc, heading).lines() {
            if line.starts_with("| key |") {
                in_table = true;
                continue;
            }
            if !line.starts_with('|') {
                in_table = false;
                continue;
            }
            let Some(first) = line.split('|').nth(1).filter(|_| in_table) else {
                continue;
            };
            for key in first.split('`').skip(1).step_by(2) {
                if !keys.contains(&key) {
                    stale.push(format!("{heading}: `{key}`"));
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "keys a table of the guide lists but the jobs file refuses:\n  {}",
        stale.join("\n  ")
    );
}

#[test]
fn the_reference_check_sees_a_missing_key() {
    // The two checks above must be able to fail: a key absent from a section is not named,
    // and one present only in another section does not count.
    let agents = section(JOBS_FILE, "## `agents:`");
    assert!(names(agents, "max_turns"));
    assert!(!names(agents, "no_such_key"));
    assert!(
        !names(agents, "cwd"),
        "`cwd` belongs to mcp_servers:, not agents:"
    );
    assert!(names("  a:\n    every_seconds: 3", "every_seconds"));
    assert!(!names("x_every_seconds: 3", "every_seconds"));
}
