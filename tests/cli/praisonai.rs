//! Coming from PraisonAI, through the binary: its scheduler YAML (the reference docs' examples,
//! in `tests/data/praisonai/`) fails `validate` with a pointer to what to write, converts with
//! `cronsole import praisonai` into a file that validates and keeps the schedules, messages and
//! policies, and what could not be mapped is printed with its position. A PraisonAI key name
//! in a jobs file gets the cronsole name; the migration guide's table is the code's table.

use std::path::{Path, PathBuf};

use crate::support::cli::run_plain;
use crate::support::tempdir as tmp;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/praisonai")
        .join(name)
}

const FIXTURES: [&str; 3] = ["misfire-policy.yaml", "monitor.yaml", "scheduler.yaml"];

/// A PraisonAI file as it is: refused with what to add and the pointer to `import`.
#[test]
fn praisonai_files_verbatim_say_what_to_write() {
    let dir = tmp("praison-verbatim");
    for f in FIXTURES {
        let path = fixture(f);
        let (code, out, err) = run_plain(&dir, &["validate", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{f}: {out}{err}");
        assert!(
            out.contains("missing `agent`: a job with a message asks an agent"),
            "{f}: {out}"
        );
        assert!(out.contains("cronsole import praisonai FILE"), "{f}: {out}");
    }
    let (_, out, _) = run_plain(
        &dir,
        &["validate", fixture("scheduler.yaml").to_str().unwrap()],
    );
    // Its keys get cronsole's names, at their positions.
    for want in [
        "PraisonAI's `max_cost` is `max_cost_usd` here",
        "PraisonAI's `timeout` is `timeout_seconds` here",
        "PraisonAI's `on_success` is a Python callback",
        "PraisonAI's `agent_id` is `agent` here",
        "PraisonAI's `task` is `message` here",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    assert!(
        out.contains("scheduler.yaml:24:5: error: jobs[2].max_cost"),
        "{out}"
    );
}

/// Every reference example converts into a file that validates, with the one agent of the
/// options, the schedules and policies kept, and the unmappable printed with positions.
#[test]
fn import_praisonai_converts_the_reference_examples() {
    let dir = tmp("praison-import");
    for f in FIXTURES {
        let out_file = dir.join(f.replace(".yaml", ".cronsole.yaml"));
        let (code, out, err) = run_plain(
            &dir,
            &[
                "import",
                "praisonai",
                fixture(f).to_str().unwrap(),
                "--output",
                out_file.to_str().unwrap(),
                "--model",
                "gpt-4o",
            ],
        );
        assert_eq!(code, 0, "{f}: {out}{err}");
        assert!(err.contains("the converted file validates"), "{f}: {err}");
        let (code, vout, verr) = run_plain(&dir, &["validate", out_file.to_str().unwrap()]);
        // Warnings only (the agent's key variable is not set here).
        assert_eq!(code, 0, "{f}: {vout}{verr}");
        let text = std::fs::read_to_string(&out_file).unwrap();
        assert!(text.contains("model: \"gpt-4o\""), "{text}");
        assert!(text.contains("api_key_env: \"OPENAI_API_KEY\""), "{text}");
        // Never over an existing file.
        let (code, _, err) = run_plain(
            &dir,
            &[
                "import",
                "praisonai",
                fixture(f).to_str().unwrap(),
                "-o",
                out_file.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("nothing was written"), "{err}");
        assert_eq!(std::fs::read_to_string(&out_file).unwrap(), text);
    }

    let (code, yaml, err) = run_plain(
        &dir,
        &[
            "import",
            "praisonai",
            fixture("scheduler.yaml").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    // Lifetime max_cost: per-job limits over all time.
    assert!(
        yaml.contains("budget:\n  max_cost_usd: null\n  period: total"),
        "{yaml}"
    );
    assert!(yaml.contains("max_cost_usd: 1.00"), "{yaml}");
    assert!(err.contains("max_cost is a lifetime total"), "{err}");
    // Mapped names.
    assert!(yaml.contains("timeout_seconds: 120"), "{yaml}");
    assert!(yaml.contains("message: \"Summarise tech news\""), "{yaml}");
    assert!(yaml.contains("run_immediately: true"), "{yaml}");
    assert!(yaml.contains("schedule: \"*/30m\""), "{yaml}");
    assert!(
        yaml.contains("monitor: {\"url\": \"https://news.ycombinator.com/\"}"),
        "{yaml}"
    );
    assert!(yaml.contains("command: \"curl -sf --max-time 5"), "{yaml}");
    // Callbacks are reported, with their positions, pointing at sinks and `after:`.
    assert!(err.contains("not mapped (2):"), "{err}");
    assert!(
        err.contains("scheduler.yaml:17:5: job 'data-processor': `on_success` is a Python callback: use `deliver: [sink]`"),
        "{err}"
    );
    assert!(err.contains("on: failure}`"), "{err}");
    assert!(err.contains("agents.assistant.instructions"), "{err}");
    // The converted jobs keep their schedules: the same next slots as written.
    let out_file = dir.join("sched.yaml");
    std::fs::write(&out_file, &yaml).unwrap();
    let (_, v, _) = run_plain(&dir, &["validate", out_file.to_str().unwrap()]);
    assert!(
        v.contains("new-cron: 0 7 * * * — at 07:00 every day (UTC) (on the clock)"),
        "{v}"
    );

    assert!(v.contains("8 of 8 job(s) valid"), "{v}");

    // Not a scheduler file, and not YAML: exit 2, named.
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "agents: {}\n").unwrap();
    let (code, _, err) = run_plain(&dir, &["import", "praisonai", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("expected a mapping with a `jobs:` list"),
        "{err}"
    );
    std::fs::write(&bad, "jobs: [\n").unwrap();
    let (code, _, err) = run_plain(&dir, &["import", "praisonai", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.yaml:"), "{err}");
}

/// A conversion that does not validate is not a success: exit 2, the output still written to be
/// fixed by hand, and each problem named at its place in the PraisonAI file (not in the
/// converted text, which the operator did not write) or at the option that wrote it.
#[test]
fn import_with_errors_exits_2_and_names_positions_in_the_praisonai_file() {
    let dir = tmp("praison-errors");
    let src = dir.join("praison.yaml");
    std::fs::write(
        &src,
        "# a PraisonAI scheduler file\n\
         jobs:\n\
         \x20 - name: ok\n\
         \x20   schedule: hourly\n\
         \x20   message: \"fine\"\n\
         \x20 - name: broken\n\
         \x20   message: \"Poll\"\n\
         \x20   max_retries: 5\n\
         \x20   schedule: \"every banana\"\n\
         \x20 - name: unscheduled\n\
         \x20   task: \"Never\"\n",
    )
    .unwrap();
    let out_file = dir.join("converted.yaml");
    let (code, _, err) = run_plain(
        &dir,
        &[
            "import",
            "praisonai",
            src.to_str().unwrap(),
            "-o",
            out_file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("2 error(s) to fix by hand"), "{err}");
    // The bad schedule at its value in the input (line 9, column 15), the missing one on the
    // job's line (10): positions of praison.yaml, never of the converted text.
    let p = src.display().to_string();
    assert!(
        err.contains(&format!("{p}:9:15: error: jobs[1].schedule")),
        "{err}"
    );
    assert!(
        err.lines()
            .any(|l| l.contains(&format!("{p}:10:")) && l.contains("error: jobs[2]")),
        "{err}"
    );
    assert!(!err.contains("converted.yaml:"), "{err}");
    let written = std::fs::read_to_string(&out_file).expect("the output is still written");
    assert!(written.contains("every banana"), "{written}");

    // An option that makes the converted file invalid is named as the option.
    let (code, _, err) = run_plain(
        &dir,
        &[
            "import",
            "praisonai",
            fixture("monitor.yaml").to_str().unwrap(),
            "--provider",
            "carrier-pigeon",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--provider: error: agents.assistant.provider"),
        "{err}"
    );

    // A clean conversion still exits 0.
    let (code, _, err) = run_plain(
        &dir,
        &[
            "import",
            "praisonai",
            fixture("monitor.yaml").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
}

/// An input that cannot be read is named as PraisonAI's file, once, with no position (it has
/// none), and nothing is written.
#[test]
fn import_of_a_missing_file_names_it_as_the_praisonai_file() {
    let dir = tmp("praison-missing");
    let missing = dir.join("nowhere.yaml");
    let out_file = dir.join("converted.yaml");
    let (code, out, err) = run_plain(
        &dir,
        &[
            "import",
            "praisonai",
            missing.to_str().unwrap(),
            "-o",
            out_file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "error: cannot read the PraisonAI file {}: No such file or directory (os error 2)",
            missing.display()
        ),
        "{out}"
    );
    assert!(!out_file.exists());
}
