//! `cronsole dry-run` through the binary: the gate runs, the exact prompt is
//! printed with the model, the price ceiling, the budgets and the sinks — and nothing happens:
//! the store's bytes are unchanged and the model server got zero connections.

use crate::support;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    support::cli::output(
        support::cli::cronsole(dir)
            .env("FAKE_KEY", "sk-test-0123456789abcdef")
            .arg("--store")
            .arg(dir.join("store"))
            .args(args),
    )
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn dry_run_shows_everything_and_changes_nothing() {
    let dir = support::tempdir("dry");
    // The "model server": a listener nobody may connect to.
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    server.set_nonblocking(true).unwrap();
    let url = format!("http://{}/v1", server.local_addr().unwrap());
    std::fs::write(
        dir.join("jobs.yaml"),
        [
            "budget: {max_cost_usd: 2.0, period: day}".to_string(),
            "agents:".into(),
            format!("  bot: {{provider: openai, base_url: \"{url}\", api_key_env: FAKE_KEY, model: gpt-4o-mini, instructions: \"Be brief.\", max_tokens: 200}}"),
            "delivery:".into(),
            "  audit: {file: out.jsonl}".into(),
            "jobs:".into(),
            "  - name: collect".into(),
            "    schedule: every 1h".into(),
            "    command: \"echo collected\"".into(),
            "  - name: triage".into(),
            "    schedule: every 1h".into(),
            "    agent: bot".into(),
            "    message: \"Triage the findings.\"".into(),
            "    pre_run: \"echo gate-ran > gate.txt; exit 0\"".into(),
            "    context_from: [collect]".into(),
            "    on_missing_context: run".into(),
            "    max_cost_usd: 0.5".into(),
            "    deliver: [audit]".into(),
            "  - name: closed".into(),
            "    schedule: every 1h".into(),
            "    agent: bot".into(),
            "    message: \"Never today.\"".into(),
            "    pre_run: \"exit 1\"".into(),
            "  - name: tight".into(),
            "    schedule: every 1h".into(),
            "    agent: bot".into(),
            "    message: \"Too dear for its limit.\"".into(),
            "    max_cost_usd: 0.00001".into(),
        ]
        .join("\n")
    )
    .unwrap();
    let (c, _, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    let before = snapshot(&dir.join("store"));

    let (c, out, err) = run(&dir, &["dry-run", "triage"]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("gate:   go"), "{out}");
    assert!(dir.join("gate.txt").exists(), "the pre_run gate really ran");
    assert!(
        out.contains("model:  gpt-4o-mini (agent bot, max_tokens 200)"),
        "{out}"
    );
    assert!(out.contains("price ceiling of the call: $"), "{out}");
    // Nothing spent yet is `$0.00`, never the `$-0.00` of an empty f64 sum.
    assert!(
        out.contains("budget: global $2.00/day (spent $0.00)"),
        "{out}"
    );
    assert!(!out.contains("$-0"), "{out}");
    assert!(out.contains("budget: job $0.50/day"), "{out}");
    assert!(out.contains("sinks:  audit"), "{out}");
    assert!(out.contains("Triage the findings."), "{out}");

    let (c, out, err) = run(&dir, &["dry-run", "triage", "--json", "--no-gates"]);
    assert_eq!(c, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(v["gate"], "not run (--no-gates)");
    assert_eq!(v["sinks"], serde_json::json!(["audit"]));
    assert!(v["price_ceiling_usd"].as_f64().unwrap() > 0.0);
    assert!(
        v["prompt"]
            .as_str()
            .unwrap()
            .contains("Triage the findings."),
        "{v}"
    );

    // A gate that says no is reported; the run would stop there.
    let (c, out, err) = run(&dir, &["dry-run", "closed", "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["would_run"], false, "{v}");
    assert!(v["gate"].as_str().unwrap().starts_with("skipped"), "{v}");

    // One worst case, one figure: the refusal's "may cost up to" is the price ceiling shown.
    let (c, out, err) = run(&dir, &["dry-run", "tight"]);
    assert_eq!(c, 0, "{err}");
    let after = |needle: &str| {
        let at = out
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} in {out}"))
            + needle.len();
        out[at..]
            .split(|ch: char| ch.is_whitespace() || ch == ',')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let ceiling = after("price ceiling of the call: ");
    assert!(ceiling.starts_with("$0.000"), "{out}");
    assert_eq!(after("may cost up to "), ceiling, "{out}");

    // Unknown job: exit 2.
    let (c, _, err) = run(&dir, &["dry-run", "ghost"]);
    assert_eq!(c, 2);
    assert!(err.contains("ghost"), "{err}");

    // Nothing changed: no row, no state, no reservation; the model was never contacted and
    // nothing was delivered.
    assert_eq!(
        snapshot(&dir.join("store")),
        before,
        "the store's bytes changed"
    );
    assert!(
        matches!(server.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the model server got a connection"
    );
    assert!(!dir.join("out.jsonl").exists(), "something was delivered");
    let (_, hist, _) = run(&dir, &["history", "--json"]);
    assert!(hist.trim().is_empty(), "{hist}");
}

/// A dry run's gate sees the environment a real run's gate would: every configured agent's key
/// variable removed (it used to inherit cronsole's whole environment, so a `pre_run` printing a
/// key put it into the prompt the dry run shows).
#[test]
fn dry_run_gates_do_not_see_the_agents_api_keys() {
    let dir = support::tempdir("dry-env");
    std::fs::write(
        dir.join("jobs.yaml"),
        [
            "agents:",
            "  bot: {provider: openai, base_url: \"http://127.0.0.1:9/v1\", api_key_env: FAKE_KEY, model: gpt-4o-mini}",
            "jobs:",
            "  - name: peek",
            "    schedule: every 1h",
            "    agent: bot",
            "    message: \"Look.\"",
            "    pre_run: \"echo key=${FAKE_KEY:-scrubbed}\"",
        ]
        .join("\n"),
    )
    .unwrap();
    let (c, _, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    let (c, out, err) = run(&dir, &["dry-run", "peek", "--json"]);
    assert_eq!(c, 0, "{err}");
    assert!(!out.contains("sk-test-0123456789abcdef"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["prompt"].as_str().unwrap().contains("key=scrubbed"),
        "{v}"
    );
}

/// Outside text in the printed dry run is inert (it could otherwise rewrite the operator's
/// terminal): a gate's output, the job's
/// `message` and the agent's `instructions` holding `ESC ] 0 ; … BEL`, `ESC [ 2 J` or U+202E
/// are shown escaped (`^[`, `\u{202e}`), as `history` shows them; `--json` keeps the exact text.
#[test]
fn dry_run_text_escapes_terminal_control_from_outside_text() {
    let dir = support::tempdir("dry-esc");
    std::fs::write(
        dir.join("gate.sh"),
        "printf 'page \\033]0;owned-title\\007\\033[2J \\342\\200\\256gnp.exe\\n'\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("jobs.yaml"),
        [
            "agents:",
            "  bot: {provider: openai, base_url: \"http://127.0.0.1:9/v1\", api_key_env: FAKE_KEY, model: gpt-4o-mini, instructions: \"Be \\e[31mred\\u202E.\"}",
            "jobs:",
            "  - name: peek",
            "    schedule: every 1h",
            "    agent: bot",
            "    message: \"Look \\e]0;msg\\a here.\"",
            "    pre_run: \"sh gate.sh\"",
        ]
        .join("\n"),
    )
    .unwrap();
    let (c, _, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    let (c, out, err) = run(&dir, &["dry-run", "peek"]);
    assert_eq!(c, 0, "{err}");
    for bad in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!out.contains(bad), "{bad:?} reached the terminal: {out:?}");
    }
    assert!(
        out.contains("page ^[]0;owned-title^G^[[2J \\u{202e}gnp.exe"),
        "{out}"
    );
    assert!(out.contains("Look ^[]0;msg^G here."), "{out}");
    assert!(out.contains("Be ^[[31mred\\u{202e}."), "{out}");
    // Lines are kept: the prompt is still readable text, not one folded line.
    assert!(out.contains("--- prompt ---\n"), "{out}");

    let (c, out, err) = run(&dir, &["dry-run", "peek", "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["prompt"]
            .as_str()
            .unwrap()
            .contains("page \u{1b}]0;owned-title\u{7}\u{1b}[2J \u{202e}gnp.exe"),
        "{v}"
    );
}

/// The price ceiling `dry-run` shows is what the run's first turn reserves, tool definitions
/// included: a reply without usage is booked at its reservation, and that booking equals the
/// dry run's figure (and the tools forecast's one-turn figure) to the last digit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_price_ceiling_is_the_first_turns_reservation_tools_included() {
    use cronsole::store::{HistoryQuery, HistoryReader};
    use cronsole::testkit::llm::{FakeLlm, Reply};
    const KEY: &str = "sk-test-0123456789abcdef";
    // Every request answered alike: the schedule's own first slot may run beside the trigger.
    let fake = FakeLlm::openai(
        KEY,
        vec![Reply::Forever(Box::new(Reply::ok_without_usage("done")))],
    )
    .await
    .unwrap();
    let dir = support::tempdir("dry-tools");
    // A heavy definition, so leaving it out would show.
    let description = "Looks a word up in the operator's glossary. ".repeat(80);
    std::fs::write(
        dir.join("jobs.yaml"),
        format!(
            "budget: {{max_cost_usd: 5.0, period: day}}
tools:
  lookup:
    description: \"{description}\"
    parameters: {{ type: object, properties: {{ word: {{ type: string }} }} }}
    command: [cat]
agents:
  bot:
    provider: openai
    base_url: {}
    api_key_env: FAKE_KEY
    model: gpt-4o-mini
    instructions: Be brief.
    max_tokens: 300
    tools: [lookup]
jobs:
  - name: ask
    schedule: every 1h
    agent: bot
    message: Define the word.
",
            fake.base_url()
        ),
    )
    .unwrap();
    let store = dir.join("store");
    support::cli::apply(&dir.join("jobs.yaml"), &store);
    let d = dir.to_path_buf();
    let (code, out, err) =
        tokio::task::spawn_blocking(move || run(&d, &["dry-run", "ask", "--json"]))
            .await
            .unwrap();
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ceiling = v["price_ceiling_usd"]
        .as_f64()
        .unwrap_or_else(|| panic!("{v:#}"));
    let one_turn = v["tools"]["one_turn_usd"].as_f64().unwrap();
    assert!(
        v["tools"]["definition_tokens"].as_u64().unwrap() > 3000,
        "{v:#}"
    );
    assert!(
        (ceiling - one_turn).abs() < 1e-15,
        "{ceiling} vs {one_turn}"
    );
    // In text, the two figures print alike, in the one money format.
    let d = dir.to_path_buf();
    let (_, text, _) = tokio::task::spawn_blocking(move || run(&d, &["dry-run", "ask"]))
        .await
        .unwrap();
    let shown = cronsole::testkit::internals::cost::usd_up(ceiling);
    assert!(
        text.contains(&format!("price ceiling of the call: {shown} (worst case)"))
            && text.contains(&format!("worst case: {shown} for one turn")),
        "{text}"
    );
    // `describe` says the worst case in the very words `dry-run` does: one text, rounded up.
    let worst = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("worst case: "))
        .unwrap()
        .to_string();
    let d = dir.to_path_buf();
    let (_, described, _) = tokio::task::spawn_blocking(move || run(&d, &["describe", "ask"]))
        .await
        .unwrap();
    assert!(
        described.contains(&format!("tokens per turn; worst case: {worst}")),
        "{worst}\n{described}"
    );

    let d = dir.to_path_buf();
    let (code, _, err) = tokio::task::spawn_blocking(move || run(&d, &["trigger", "ask"]))
        .await
        .unwrap();
    assert_eq!(code, 0, "{err}");
    let mut owner = support::cli::cronsole(&dir)
        .env("FAKE_KEY", KEY)
        .args(["run", "--store", "store", "--for", "60s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let row = support::wait::poll_for_async(std::time::Duration::from_secs(60), || {
        cronsole::store::file::FileStore::open_existing(&store)
            .and_then(|s| s.history(&HistoryQuery::default()))
            .unwrap_or_default()
            .into_iter()
            .next()
    })
    .await
    .expect("no row");
    let _ = owner.kill();
    let _ = owner.wait();
    assert!(fake.request_count() >= 1);
    let reason = row.reason.clone().unwrap_or_default();
    assert!(reason.contains("booked at the reservation"), "{row:#?}");
    assert!(
        (row.cost_usd - ceiling).abs() < 1e-15,
        "reserved ${} for the turn, dry-run showed ${ceiling}",
        row.cost_usd
    );
}

/// `dry-run`'s next run keeps the fraction of a second of an `at:` instant, as `jobs` and
/// `describe` show it.
#[test]
fn dry_run_shows_the_fraction_of_an_at_instant() {
    let dir = support::tempdir("dryfrac");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: frac\n    schedule: \"at:2030-01-02T03:04:05.500Z\"\n    command: \"true\"\n",
    )
    .unwrap();
    let (c, _, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    let (c, out, err) = run(&dir, &["dry-run", "frac"]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("next:   2030-01-02T03:04:05.500Z"), "{out}");
}
