//! The store commands end to end through the binary: apply → jobs → pause/resume/trigger →
//! history → stats, with the documented exit codes (0 ok, 1 runtime condition, 2 bad input).

use crate::support;

use crate::support::cli::run;

#[test]
fn apply_jobs_pause_trigger_history_stats() {
    let dir = support::tempdir("cli");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: alpha\n    schedule: every 1h\n    command: \"echo a\"\n  - name: beta\n    schedule: \"0 7 * * *\"\n    command: \"echo b\"\n    max_cost_usd: 0.5\n",
    )
    .unwrap();
    let (c, out, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    assert!(
        out.contains("created   alpha") && out.contains("2 created"),
        "{out}"
    );
    let (c, out, _) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0);
    assert!(
        out.contains("0 created, 0 updated, 0 retired, 2 unchanged"),
        "{out}"
    );

    let (c, out, _) = run(&dir, &["jobs", "--json"]);
    assert_eq!(c, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0]["name"], "alpha");
    assert_eq!(v[0]["state"], "idle");

    assert_eq!(run(&dir, &["pause", "alpha"]).0, 0);
    let (_, out, _) = run(&dir, &["jobs"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("alpha") && l.contains("paused")),
        "{out}"
    );
    assert_eq!(run(&dir, &["resume", "alpha"]).0, 0);
    let (c, _, err) = run(&dir, &["pause", "nope"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("nope"));

    let (c, out, _) = run(&dir, &["trigger", "beta"]);
    assert_eq!(c, 0);
    assert!(out.contains("triggered beta"));
    let (c, out, _) = run(&dir, &["trigger", "beta"]);
    assert_eq!(c, 0);
    assert!(out.contains("already"));
    assert_eq!(run(&dir, &["trigger", "ghost"]).0, 2);

    let (c, out, _) = run(&dir, &["history", "--json"]);
    assert_eq!(c, 0);
    assert!(out.is_empty());
    assert_eq!(run(&dir, &["history", "--status", "bogus"]).0, 2);
    assert_eq!(run(&dir, &["history", "--since", "yesterday-ish"]).0, 2);
    assert_eq!(run(&dir, &["history", "--since", "2h"]).0, 0);

    let (c, out, _) = run(&dir, &["stats", "--json"]);
    assert_eq!(c, 0);
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["global"]["total_executions"], 0);
    assert_eq!(
        s["global"]["remaining_budget"], 1.0,
        "default budget $1/day"
    );
    assert_eq!(s["jobs"][1]["remaining_budget"], 0.5);
    assert_eq!(s["jobs"][0]["remaining_budget"], serde_json::Value::Null);

    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: alpha\n    schedule: every 2h\n    command: \"echo a\"\n",
    )
    .unwrap();
    let (_, out, _) = run(&dir, &["apply", "jobs.yaml"]);
    assert!(
        out.contains("updated   alpha") && out.contains("retired   beta"),
        "{out}"
    );
    // The retired job is named with the file it is absent from, and how to keep it.
    assert!(
        out.contains(
            "note: beta was retired: it is not in jobs.yaml, and a store keeps only the jobs of \
             the file last applied to it; to keep it, add it to jobs.yaml, or give each jobs \
             file its own store (--store DIR)"
        ),
        "{out}"
    );
    let (_, out, _) = run(&dir, &["jobs"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("beta") && l.contains("retired")),
        "{out}"
    );
}

/// `apply` hands a large file's jobs to the store one at a time (so a million-job file
/// needs only its text in memory): a first apply of
/// more than 1 024 jobs goes straight into the snapshot, chains to later jobs resolve, a
/// re-apply changing one job updates one, and a file whose last job is bad is refused with
/// its position before any store is created.
#[test]
fn apply_of_a_large_file_streams_and_refuses_a_late_error_before_touching_the_store() {
    let dir = support::tempdir("cli-large");
    let n = 1_100;
    let file_text = |last: &str| {
        let mut t = String::from("jobs:\n");
        for i in 0..n {
            t.push_str(&format!(
                "  - name: j{i:04}\n    schedule: \"0 3 1 1 *\"\n    command: \"{}\"\n",
                if i == n - 1 { last } else { "true" }
            ));
        }
        // Chained to a job written before it, and one chained to a job written after it.
        t.push_str("  - name: early\n    after: late\n    command: \"true\"\n");
        t.push_str("  - name: late\n    after: j0000\n    command: \"true\"\n");
        t.push_str("defaults:\n  tz: UTC\n");
        t
    };
    std::fs::write(
        dir.join("bad.yaml"),
        file_text("true").replace("after: j0000", "after: nobody"),
    )
    .unwrap();
    let (c, _, err) = run(&dir, &["apply", "bad.yaml"]);
    assert_eq!(c, 2, "{err}");
    assert!(
        err.contains(&format!("bad.yaml:{}:12", 3 * n + 6)) && err.contains("unknown job"),
        "{err}"
    );
    assert!(!dir.join("store").exists(), "no store for a refused file");

    std::fs::write(dir.join("jobs.yaml"), file_text("true")).unwrap();
    let (c, out, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    assert!(
        out.contains(&format!("{} created, 0 updated", n + 2)),
        "{out}"
    );
    let journal = std::fs::read_to_string(dir.join("store/jobs.journal")).unwrap();
    assert_eq!(journal.lines().count(), 1, "the batch went to the snapshot");
    let (c, out, _) = run(&dir, &["jobs", "--json"]);
    assert_eq!(c, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), n + 2);

    std::fs::write(dir.join("jobs.yaml"), file_text("true changed")).unwrap();
    let (c, out, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    assert!(
        out.contains(&format!(
            "0 created, 1 updated, 0 retired, {} unchanged",
            n + 1
        )),
        "{out}"
    );
    let journal = std::fs::read_to_string(dir.join("store/jobs.journal")).unwrap();
    assert_eq!(journal.lines().count(), 2, "one changed job, one line");
}

/// Task SMALL item 2: an `apply` that changes the budget's `period` kind recounts each spending
/// job's spend in the new period from history, and says so: one line per job, with the period
/// and the amount found.
#[test]
fn apply_prints_each_job_whose_spend_a_budget_period_edit_recounted() {
    use cronsole::model::Status;
    use cronsole::testkit::store::{ClaimAt, FinishClaim, claim_row};
    let dir = support::tempdir("cli-recount");
    let jobs = |period: &str| {
        format!(
            "budget:\n  max_cost_usd: 5\n  period: {period}\njobs:\n  - name: spender\n    \
             schedule: every 1m\n    command: \"echo a\"\n  - name: idle\n    \
             schedule: every 1m\n    command: \"echo b\"\n"
        )
    };
    std::fs::write(dir.join("jobs.yaml"), jobs("day")).unwrap();
    let (c, _, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    // One run of `spender` that cost $0.02, written through the library (no model is called).
    {
        let store = cronsole::store::file::FileStore::open(&dir.join("store")).unwrap();
        let at = chrono::Utc::now() + chrono::Duration::minutes(2);
        let claims = store.claim_at(at, "test-owner", 10).claims;
        for c in &claims {
            let name = &c.job.def.name;
            let mut row = claim_row(c, "test-owner", Status::Succeeded, at);
            row.cost_usd = if name == "spender" { 0.02 } else { 0.0 };
            store.finish_row(c, row);
        }
        assert!(claims.iter().any(|c| c.job.def.name == "spender"));
    }
    std::fs::write(dir.join("jobs.yaml"), jobs("month")).unwrap();
    let (c, out, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    let recounted: Vec<&str> = out.lines().filter(|l| l.starts_with("recounted")).collect();
    // `idle` holds no money: nothing to recount. The row finished inside the month (at or
    // after its start), so the month's spend is the row's cost.
    assert_eq!(recounted.len(), 1, "{out}");
    assert!(
        recounted[0].starts_with("recounted spender: $0.02 spent in budget period month:")
            && recounted[0].ends_with("(counted from history)"),
        "{out}"
    );
    assert!(
        out.contains("settings updated: budget period day → month"),
        "{out}"
    );
    // Applied again: nothing left to recount, nothing printed.
    let (c, out, _) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0);
    assert!(!out.contains("recounted"), "{out}");
}

/// A disabled job (`enabled: false`) with a manual trigger waiting is `queued` in `jobs --json` as
/// in the table and in `describe` (an operator's trigger runs even though the job is disabled, so
/// `queued` is what happens next).
#[test]
fn a_disabled_job_with_a_trigger_waiting_is_queued_in_every_listing() {
    let dir = support::tempdir("cli-queued");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: off\n    schedule: every 1h\n    command: \"true\"\n    enabled: false\n  - name: on\n    schedule: every 1h\n    command: \"true\"\n",
    )
    .unwrap();
    assert_eq!(run(&dir, &["apply", "jobs.yaml"]).0, 0);
    let (c, out, err) = run(&dir, &["trigger", "off"]);
    assert_eq!(c, 0, "{out}{err}");
    let (c, out, _) = run(&dir, &["jobs", "--json"]);
    assert_eq!(c, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["name"], "off");
    assert_eq!(v[0]["state"], "queued", "{out}");
    assert_eq!(v[0]["definition"]["enabled"], false);
    assert_eq!(v[1]["state"], "idle");
    let (c, out, _) = run(&dir, &["jobs"]);
    assert_eq!(c, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("off") && l.contains("queued")),
        "{out}"
    );
    let (c, out, _) = run(&dir, &["describe", "off", "--json"]);
    assert_eq!(c, 0);
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["state"], "queued", "{out}");
}

/// One "next" in every view, so no two views disagree about when a job fires. A paused or disabled
/// job fires nothing: `jobs` says `n/a` and `jobs --json` has `next_fire_at: null` (its stored
/// `next_slot` stays); a jittered job's `describe` shows the fire instant `jobs` shows, with its
/// slot named beside it.
#[test]
fn every_listing_agrees_on_when_a_job_fires_next() {
    let dir = support::tempdir("cli-next");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: held\n    schedule: every 1h\n    command: \"true\"\n  - name: jit\n    schedule: every 1h\n    command: \"true\"\n    jitter_seconds: 3000\n  - name: off\n    schedule: every 1h\n    command: \"true\"\n    enabled: false\n",
    )
    .unwrap();
    assert_eq!(run(&dir, &["apply", "jobs.yaml"]).0, 0);
    assert_eq!(run(&dir, &["pause", "held"]).0, 0);
    let (c, out, _) = run(&dir, &["jobs", "--json"]);
    assert_eq!(c, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let job = |n: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == n)
            .unwrap()
            .clone()
    };
    for n in ["held", "off"] {
        let j = job(n);
        assert!(j["next_slot"].is_string(), "{j}");
        assert!(j["next_fire_at"].is_null(), "{n} fires nothing: {j}");
    }
    let j = job("jit");
    let (slot, fire) = (
        j["next_slot"].as_str().unwrap().to_string(),
        j["next_fire_at"].as_str().unwrap().to_string(),
    );
    let (c, out, _) = run(&dir, &["describe", "jit", "--utc"]);
    assert_eq!(c, 0);
    let line = out.lines().find(|l| l.starts_with("next:")).unwrap();
    let hms = |t: &str| t[11..19].to_string();
    assert!(line.contains(&hms(&fire)), "{line} should show {fire}");
    if slot != fire {
        assert!(
            line.contains(", slot ") && line.contains(&hms(&slot)),
            "{line}"
        );
    }
    assert!(!line.contains("(due"), "{line}");
    // A job with nothing to note says its state alone, not "idle — -".
    let state = out.lines().find(|l| l.starts_with("state:")).unwrap();
    assert_eq!(
        state.split_whitespace().collect::<Vec<_>>(),
        ["state:", "idle"],
        "{out}"
    );
    let (c, out, _) = run(&dir, &["describe", "off", "--utc"]);
    assert_eq!(c, 0);
    let state = out.lines().find(|l| l.starts_with("state:")).unwrap();
    assert!(state.contains(" — disabled in the jobs file"), "{state}");
    // `jobs` prints NEXT to the second, as every other instant of its table: the jitter
    // offset's milliseconds are not shown.
    let (c, out, _) = run(&dir, &["jobs", "--utc"]);
    assert_eq!(c, 0);
    let row = out
        .lines()
        .find(|l| l.starts_with("jit "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains(&format!("{} UTC", hms(&fire))), "{row}");
    assert!(!row.contains(&format!("{}.", hms(&fire))), "{row}");
}

/// Every money member of every command's `--json` output: its decimals, at most the nine the
/// one JSON money rule keeps (`text::json_usd`). The number's text as printed, so an amount
/// like `0.30000000000000004` (two costs added) or `0.00021000000000000001` fails here.
fn money_decimals_in(what: &str, json: &str) -> usize {
    let key = regex_lite_money();
    let mut seen = 0;
    for (k, num) in key(json) {
        seen += 1;
        let (mant, exp) = match num.split_once(['e', 'E']) {
            Some((m, e)) => (m, e.parse::<i64>().unwrap()),
            None => (num.as_str(), 0),
        };
        let frac = mant.split_once('.').map_or(0, |(_, f)| f.len() as i64);
        let decimals = (frac - exp).max(0);
        assert!(
            decimals <= 9,
            "{what}: \"{k}\": {num} has {decimals} decimals\n{json}"
        );
    }
    seen
}

/// Every `"key": number` pair of `json` whose key is a money name (`…_usd`, `usd`, `stats`'
/// `cost_per_execution` and `remaining_budget`).
fn regex_lite_money() -> impl Fn(&str) -> Vec<(String, String)> {
    |json: &str| {
        let mut found = Vec::new();
        let b = json.as_bytes();
        let mut i = 0;
        while let Some(q) = json[i..].find('"') {
            let start = i + q + 1;
            let Some(len) = json[start..].find('"') else {
                break;
            };
            let key = &json[start..start + len];
            let mut j = start + len + 1;
            while j < b.len() && b[j] == b' ' {
                j += 1;
            }
            if j < b.len() && b[j] == b':' {
                j += 1;
                while j < b.len() && b[j] == b' ' {
                    j += 1;
                }
                let n_end = json[j..]
                    .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
                    .map_or(b.len(), |e| j + e);
                let money = key.ends_with("_usd")
                    || matches!(key, "usd" | "cost_per_execution" | "remaining_budget");
                if money && n_end > j {
                    found.push((key.to_string(), json[j..n_end].to_string()));
                }
            }
            i = start + len + 1;
        }
        found
    }
}

/// One rule for money in JSON: every money member of every command that prints JSON (`jobs`,
/// `describe`, `history`, `stats`, `dry-run`, `run --log-format json` lines, `check`) has at most
/// nine decimals, even when the stored costs and their sums carry binary noise.
#[test]
fn every_json_money_field_of_every_command_keeps_nine_decimals_at_most() {
    use cronsole::model::Status;
    use cronsole::testkit::store::{ClaimAt, FinishClaim, claim_row};
    let dir = support::tempdir("cli-json-money");
    std::fs::write(
        dir.join("jobs.yaml"),
        "budget:\n  max_cost_usd: 0.7\n  period: day\nagents:\n  ag:\n    provider: openai\n    \
         model: gpt-4o-mini\n    api_key_env: CRONSOLE_JSON_MONEY_UNSET_KEY\njobs:\n  \
         - name: spender\n    schedule: every 1m\n    agent: ag\n    message: hi\n    \
         max_cost_usd: 0.65\n  - name: other\n    schedule: every 1m\n    command: \"true\"\n",
    )
    .unwrap();
    let (c, _, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    // Rows whose costs (and their sums) are not nine-decimal numbers, written through the
    // library: 0.1 + 0.2 and 3 × 0.00007 are famous for their noise.
    let noisy = [0.1, 0.2, 0.00007 * 3.0, 0.000_012_345_678_912_3];
    {
        let store = cronsole::store::file::FileStore::open(&dir.join("store")).unwrap();
        for (k, cost) in noisy.iter().enumerate() {
            let at = chrono::Utc::now() + chrono::Duration::minutes(2 * (k as i64 + 1));
            for c in &store.claim_at(at, "test-owner", 10).claims {
                let mut row = claim_row(c, "test-owner", Status::Succeeded, at);
                row.cost_usd = if c.job.def.name == "spender" {
                    *cost
                } else {
                    0.0
                };
                store.finish_row(c, row);
            }
        }
    }
    let mut seen = 0;
    for args in [
        &["jobs", "--json"][..],
        &["describe", "spender", "--json"],
        &["history", "--json"],
        &["history", "--json", "--job", "spender"],
        &["stats", "--json"],
        &["dry-run", "spender", "--json", "--no-gates"],
        &["check", "--json"],
    ] {
        let (_, out, err) = run(&dir, args);
        assert!(!out.trim().is_empty(), "{args:?} printed nothing: {err}");
        seen += money_decimals_in(&args.join(" "), &out);
    }
    assert!(seen >= 20, "only {seen} money members were checked");
    // The noise is really there to be dropped: the history's sum is not a nine-decimal number.
    let sum: f64 = noisy.iter().sum();
    assert!(format!("{sum}").len() > 12, "{sum}");
}

/// A store written by an earlier release holds hour counters summed without rounding
/// (`"c":0.0028039999999999996`): `jobs --json` and `describe --json` print them by the one JSON
/// money rule all the same. Two jobs of one shape, the clean one first, so the listing's fast
/// path (which trusts a shape after its first record) meets the noisy one too.
#[test]
fn hour_counters_an_earlier_release_summed_print_without_their_noise() {
    use cronsole::model::Status;
    use cronsole::testkit::internals::store::filefmt;
    use cronsole::testkit::store::{ClaimAt, FinishClaim, claim_row};
    let dir = support::tempdir("cli-json-hours-legacy");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: clean\n    schedule: every 1m\n    command: \"true\"\n  \
         - name: noisy\n    schedule: every 1m\n    command: \"true\"\n",
    )
    .unwrap();
    assert_eq!(run(&dir, &["apply", "jobs.yaml"]).0, 0);
    {
        let store = cronsole::store::file::FileStore::open(&dir.join("store")).unwrap();
        let at = chrono::Utc::now() + chrono::Duration::minutes(2);
        for c in &store.claim_at(at, "test-owner", 10).claims {
            let mut row = claim_row(c, "test-owner", Status::Succeeded, at);
            row.cost_usd = 0.002804;
            store.finish_row(c, row);
        }
    }
    // The earlier release's bytes: `noisy`'s hour cost as a raw f64 sum, checksum recomputed.
    let noise = "0.0028039999999999996";
    let journal = dir.join("store").join("jobs.journal");
    let text = std::fs::read_to_string(&journal).unwrap();
    let mut edited = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            if !(l.contains("\"name\":\"noisy\"") && l.contains("\"c\":0.002804}")) {
                return l.to_string();
            }
            edited += 1;
            let l = l.replace("\"c\":0.002804}", &format!("\"c\":{noise}}}"));
            const KEY: &str = ",\"crc32\":\"";
            let at = l.rfind(KEY).unwrap();
            let crc = filefmt::crc32(format!("{}}}", &l[..at]).as_bytes());
            format!("{}{KEY}{crc:08x}\"}}", &l[..at])
        })
        .collect();
    assert!(edited > 0, "no hour counter of `noisy` to edit:\n{text}");
    std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let (c, out, err) = run(&dir, &["jobs", "--json"]);
    assert_eq!(c, 0, "{err}");
    assert!(!out.contains(noise), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for j in v.as_array().unwrap() {
        assert_eq!(j["runtime"]["counters"]["hours"][0]["c"], 0.002804, "{out}");
    }
    let (c, out, err) = run(&dir, &["describe", "noisy", "--json"]);
    assert_eq!(c, 0, "{err}");
    assert!(
        !out.contains(noise) && out.contains("\"c\": 0.002804"),
        "{out}"
    );
}

/// A job whose own limit cannot pay for one model call never calls its model: `jobs` (NOTE) and
/// `describe` say so from its definition, before any of its slots was skipped.
#[test]
fn a_budget_too_small_for_one_call_shows_before_the_first_skip() {
    let dir = support::tempdir("cli-too-small");
    std::fs::write(
        dir.join("jobs.yaml"),
        "agents:\n  ag:\n    provider: openai\n    model: gpt-4o-mini\n    \
         api_key_env: CRONSOLE_TOO_SMALL_UNSET_KEY\njobs:\n  - name: tiny\n    \
         schedule: every 1h\n    agent: ag\n    message: hi\n    max_cost_usd: 0.001\n  \
         - name: roomy\n    schedule: every 1h\n    agent: ag\n    message: hi\n    \
         max_cost_usd: 0.5\n",
    )
    .unwrap();
    let (c, _, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    let (c, out, err) = run(&dir, &["jobs"]);
    assert_eq!(c, 0, "{err}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name}: {out}"))
            .to_string()
    };
    assert!(
        line("tiny").contains("budget too small for one call: it may cost up to $")
            && line("tiny").contains("the job limit is $0.001/day"),
        "{out}"
    );
    assert!(!line("roomy").contains("too small"), "{out}");
    let (c, out, err) = run(&dir, &["describe", "tiny"]);
    assert_eq!(c, 0, "{err}");
    let budget = out
        .lines()
        .find(|l| l.starts_with("budget:"))
        .unwrap_or_default();
    assert!(
        budget.contains("budget too small for one call")
            && budget.contains("no model call is made until the limit or max_tokens changes"),
        "{out}"
    );
    let (_, out, _) = run(&dir, &["describe", "roomy"]);
    assert!(!out.contains("too small"), "{out}");
}

/// A paused job with a trigger queued: STATE says what happens next (`queued`), and the pause
/// that holds every slot after that run is said beside it in `jobs` and `describe`, with or
/// without a reason (never visible only in `jobs --json`).
#[test]
fn a_paused_job_with_a_trigger_queued_shows_its_pause_in_every_text_view() {
    let dir = support::tempdir("cli-queued-paused");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: at1\n    schedule: every 1h\n    command: \"true\"\n",
    )
    .unwrap();
    assert_eq!(run(&dir, &["apply", "jobs.yaml"]).0, 0);
    assert_eq!(run(&dir, &["trigger", "at1"]).0, 0);
    assert_eq!(run(&dir, &["pause", "at1"]).0, 0);
    let (c, out, _) = run(&dir, &["jobs"]);
    assert_eq!(c, 0);
    let line = out.lines().find(|l| l.starts_with("at1")).unwrap();
    assert!(
        line.contains("queued") && line.contains("1 queued; paused"),
        "{out}"
    );
    let (_, out, _) = run(&dir, &["describe", "at1"]);
    assert!(out.contains("queued — 1 queued; paused"), "{out}");
    let (_, out, _) = run(&dir, &["jobs", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["state"], "queued");
    // With a reason, the reason is said; a job paused with nothing queued says it in STATE.
    assert_eq!(run(&dir, &["resume", "at1"]).0, 0);
    assert_eq!(run(&dir, &["pause", "at1", "--reason", "db move"]).0, 0);
    let (_, out, _) = run(&dir, &["describe", "at1"]);
    assert!(out.contains("queued — 1 queued; paused: db move"), "{out}");
}

/// `describe --json` carries `runs`, every execution, the count `jobs --json` and the text
/// views show (`runtime.runs` is what `max_runs` counts).
#[test]
fn describe_json_and_jobs_json_carry_the_same_runs() {
    use cronsole::model::Status;
    use cronsole::testkit::store::{ClaimAt, FinishClaim, claim_row};
    let dir = support::tempdir("cli-json-runs");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: counted\n    schedule: every 1m\n    command: \"true\"\n",
    )
    .unwrap();
    let (c, _, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    {
        let store = cronsole::store::file::FileStore::open(&dir.join("store")).unwrap();
        for k in 1..=3 {
            let at = chrono::Utc::now() + chrono::Duration::minutes(2 * k);
            for c in &store.claim_at(at, "test-owner", 10).claims {
                store.finish_row(c, claim_row(c, "test-owner", Status::Succeeded, at));
            }
        }
    }
    let (c, out, err) = run(&dir, &["describe", "counted", "--json"]);
    assert_eq!(c, 0, "{err}");
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (c, out, err) = run(&dir, &["jobs", "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["runs"], 3, "{d}");
    assert_eq!(j[0]["runs"], d["runs"], "{j}");
}

/// `max_runs` counts runs whose action ran: two gated slots (`skipped`) and a `no_change` probe
/// leave `max_runs 1/3` after one run that succeeded, in `jobs` and `describe` alike, and the
/// job is not retired.
#[test]
fn skipped_slots_do_not_count_toward_max_runs_in_any_view() {
    use cronsole::model::Status;
    use cronsole::testkit::store::{ClaimAt, FinishClaim, claim_row};
    let dir = support::tempdir("cli-max-runs-skipped");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: gated\n    schedule: every 1m\n    command: \"true\"\n    max_runs: 3\n",
    )
    .unwrap();
    let (c, _, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    {
        let store = cronsole::store::file::FileStore::open(&dir.join("store")).unwrap();
        let ends = [
            Status::Skipped,
            Status::NoChange,
            Status::Skipped,
            Status::Succeeded,
        ];
        for (k, st) in (1..).zip(ends) {
            let at = chrono::Utc::now() + chrono::Duration::minutes(2 * k);
            let claims = store.claim_at(at, "test-owner", 10).claims;
            assert_eq!(claims.len(), 1, "slot {k}");
            for c in &claims {
                store.finish_row(c, claim_row(c, "test-owner", st, at));
            }
        }
    }
    let (c, out, err) = run(&dir, &["jobs"]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("max_runs 1/3"), "{out}");
    assert!(!out.contains("retired"), "{out}");
    let (c, out, err) = run(&dir, &["describe", "gated"]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("max_runs 1/3"), "{out}");
    let (c, out, err) = run(&dir, &["describe", "gated", "--json"]);
    assert_eq!(c, 0, "{err}");
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["runtime"]["runs"], 1, "{d}");
}
