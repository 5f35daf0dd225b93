//! `cronsole man`: the manual page, in roff.
//!
//! Owns: the page's own sections (DESCRIPTION, COMMANDS, FILES, ENVIRONMENT, EXIT STATUS,
//! EXAMPLES, SEE ALSO) and their text. The title, NAME, SYNOPSIS, the global OPTIONS and every
//! command's usage and flags come from the clap definition (`clap_mangen` and clap's own usage),
//! so the page cannot disagree with `--help` about what the parser accepts. Must not touch:
//! behaviour, the store.
//!
//! The COMMANDS section lists each command with its usage line, its one-line help and its flags,
//! on this one page: `clap_mangen`'s own subcommand section names `cronsole-run(1)`-style pages
//! that are never installed.

use std::io::Write;

/// What the page says about cronsole as a whole.
const DESCRIPTION: &[&str] = &[
    "cronsole runs the jobs declared in a YAML jobs file \\(em LLM-agent calls, shell commands and \
     change monitors \\(em on their schedules, and draws a live console over them. Without a \
     command it applies the jobs file to the store, starts the engine and opens the console \
     (headless when standard output is not a terminal).",
    "Each slot of each job runs at most once across every cronsole process sharing a store, and \
     leaves one history row saying what happened: succeeded, failed, skipped, no_change, missed or \
     abandoned. A monitor calls the model only when its source changed; a budget is a hard limit \
     reserved before every model call.",
    "The store is a directory (one host; the default is .cronsole/ beside the jobs file) or a \
     PostgreSQL database named by a postgres:// URL (several hosts). Commands that act on jobs \
     (pause, resume, trigger, retry, cancel, backfill) go through the store, so every process \
     sharing it honours them.",
];

/// (tag, text) entries of the FILES section.
const FILES: &[(&str, &str)] = &[
    (
        "jobs.yaml",
        "The jobs file read when --jobs is not given (in the current directory). Relative paths in \
         it are relative to its directory, where commands run.",
    ),
    (
        ".cronsole/",
        "The file store, beside the jobs file, when neither --store nor CRONSOLE_STORE names one. \
         One store per jobs file: two jobs files sharing a store retire each other's jobs.",
    ),
    (
        "STORE/logs/",
        "The engine's daily log files (with --log-to dir); cronsole logs prints them.",
    ),
    (
        "STORE/spool/completions.jsonl",
        "Completions that could not be written at a stop; the next start writes them first.",
    ),
    (
        "/etc/cronsole/jobs.yaml, /etc/cronsole/env",
        "The jobs file and the environment (API keys, CRONSOLE_STORE) of the systemd unit shipped \
         as contrib/cronsole.service.",
    ),
];

/// (variable, text) entries of the ENVIRONMENT section.
const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "CRONSOLE_STORE",
        "The store (a directory or a postgres:// URL) when --store is not given.",
    ),
    (
        "OPENAI_API_KEY, ANTHROPIC_API_KEY",
        "The default key variables of openai and anthropic agents; an agent's api_key_env names \
         another. Keys are never stored and are redacted from everything cronsole writes, and \
         commands run without them unless a job lists them in env_passthrough.",
    ),
    (
        "OPENAI_BASE_URL, ANTHROPIC_BASE_URL",
        "The endpoint of agents without a base_url (e.g. http://127.0.0.1:11434/v1 for Ollama).",
    ),
    (
        "CRONSOLE_MAX_JOBS_FILE_BYTES",
        "The jobs file's size cap in bytes (default 256 MiB).",
    ),
    (
        "CRONSOLE_CHANGE_SIGNAL",
        "off: no inotify or LISTEN; processes notice each other's changes by a 250 ms poll.",
    ),
    (
        "CRONSOLE_ZYGOTE",
        "off: each run's supervisor is started by re-executing cronsole instead of being forked \
         from a zygote.",
    ),
    ("RUST_LOG", "The log filter, e.g. cronsole=debug."),
    (
        "TZ",
        "The time zone jobs and describe print in (the console and --json use UTC).",
    ),
    ("NO_COLOR", "Draw the console without colours."),
    (
        "VISUAL, EDITOR",
        "The editor of cronsole edit (default vi).",
    ),
    (
        "PGPASSWORD, PGPASSFILE, PGSSLMODE, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY",
        "PostgreSQL defaults, read as libpq reads them; a URL parameter overrides them.",
    ),
    (
        "NOTIFY_SOCKET, JOURNAL_STREAM, WATCHDOG_USEC",
        "Set by systemd: readiness and watchdog notifications, and logging to the journal \
         (--log-to auto).",
    ),
];

/// (code, text) entries of the EXIT STATUS section.
const EXIT_STATUS: &[(&str, &str)] = &[
    (
        "0",
        "Success. check: the store is sound. dry-run: also when the gate says the job would not \
         run. edit: saved, or nothing edited.",
    ),
    (
        "1",
        "A runtime failure: the store or database unavailable, a lock held too long, completions \
         left in the spool at a stop, trigger of a job that is running, approve or deny of a run \
         that awaits no approval, diff of a monitor with no change yet, an edit plan declined.",
    ),
    (
        "2",
        "Bad input: a jobs file with errors, a bad argument, an unknown job or run id, a damaged \
         or foreign store, a probe address the rules refuse, diff of a job without a monitor, \
         cancel with nothing to cancel, an empty or reversed backfill window, edit giving up on \
         errors.",
    ),
    (
        "3",
        "approve or deny recorded the answer, but the run's owner is not live (not heard within \
         30 s, or its lease ran out): nothing runs unless that owner comes back.",
    ),
];

/// (what, command) entries of the EXAMPLES section.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "Write a starter jobs file, check it, and run it with the console:",
        "cronsole init\ncronsole validate jobs.yaml\ncronsole",
    ),
    (
        "Run headless for ten minutes, one JSON line per history row:",
        "cronsole run --jobs jobs.yaml --for 10m --log-format json",
    ),
    (
        "Preview a schedule in a time zone:",
        "cronsole next \"weekdays at 09:30\" --tz Europe/Berlin --count 3",
    ),
    (
        "What failed in the last two hours, and why:",
        "cronsole history --status failed --since 2h",
    ),
    (
        "Pause every job tagged reports, saying why, then resume them:",
        "cronsole pause --tag reports --reason \"upstream down\"\ncronsole resume --tag reports",
    ),
    (
        "Several hosts on one PostgreSQL store, and a console over it from anywhere:",
        "export CRONSOLE_STORE=postgres://cronsole@db.internal/cronsole\n\
         cronsole run --jobs jobs.yaml\ncronsole console --attach",
    ),
    (
        "Agents on a local OpenAI-compatible server (the model must be priced in pricing:):",
        "OPENAI_BASE_URL=http://127.0.0.1:11434/v1 cronsole --jobs jobs.yaml",
    ),
];

/// Escapes text for roff: backslashes, and a leading `.` or `'` that would start a request.
/// Dashes are left alone (a `-` in option names renders as a hyphen, which is what is typed).
fn esc(text: &str) -> String {
    let t = text.replace('\\', "\\e");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// Our own prose with its roff escapes already written (`\(em`): only guard line starts.
fn prose(text: &str) -> String {
    if text.starts_with('.') || text.starts_with('\'') {
        format!("\\&{text}")
    } else {
        text.to_string()
    }
}

fn section(out: &mut String, name: &str) {
    out.push_str(&format!(".SH \"{name}\"\n"));
}

fn tagged(out: &mut String, entries: &[(&str, &str)]) {
    for (tag, text) in entries {
        out.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", esc(tag), esc(text)));
    }
}

/// One entry per (visible) subcommand: bold usage line, its help, then its own flags.
fn commands(out: &mut String, cmd: &clap::Command) {
    section(out, "COMMANDS");
    // In declaration order (the storeless commands are re-registered last by `cli::command`).
    let mut subs: Vec<_> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    subs.sort_by_key(|s| s.get_display_order());
    for sub in subs {
        let mut sub = sub.clone();
        let usage = sub.render_usage().to_string();
        let usage = usage.trim_start_matches("Usage:").trim();
        out.push_str(&format!(".TP\n\\fB{}\\fR\n", esc(usage)));
        if let Some(about) = sub.get_long_about().or_else(|| sub.get_about()) {
            out.push_str(&format!("{}\n", esc(&about.to_string())));
        }
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "store" | "jobs") {
                continue; // --store and --jobs are described once, under OPTIONS.
            }
            let mut flag = match arg.get_short() {
                Some(s) => format!("-{s}, --{long}"),
                None => format!("--{long}"),
            };
            if arg.get_num_args().is_some_and(|n| n.takes_values())
                && let Some(names) = arg.get_value_names()
            {
                for n in names {
                    flag.push_str(&format!(" {n}"));
                }
            }
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            out.push_str(&format!(
                ".RS\n.TP\n\\fB{}\\fR\n{}\n.RE\n",
                esc(&flag),
                esc(&help)
            ));
        }
    }
}

/// The whole page: clap_mangen's title, NAME, SYNOPSIS and global OPTIONS, with our sections
/// around them, in the order man pages usually have them.
pub fn render(w: &mut dyn Write) -> std::io::Result<()> {
    let mut cmd = crate::cli::args::command().disable_help_subcommand(true);
    cmd.build();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    let mut out = String::new();
    section(&mut out, "DESCRIPTION");
    for para in DESCRIPTION {
        out.push_str(&format!(".PP\n{}\n", prose(para)));
    }
    w.write_all(out.as_bytes())?;
    man.render_options_section(w)?;
    let mut out = String::new();
    commands(&mut out, &cmd);
    section(&mut out, "FILES");
    tagged(&mut out, FILES);
    section(&mut out, "ENVIRONMENT");
    tagged(&mut out, ENVIRONMENT);
    section(&mut out, "EXIT STATUS");
    tagged(&mut out, EXIT_STATUS);
    section(&mut out, "EXAMPLES");
    for (what, example) in EXAMPLES {
        out.push_str(&format!(".PP\n{}\n.PP\n.nf\n.RS 4\n", esc(what)));
        for line in example.lines() {
            out.push_str(&format!("{}\n", esc(line)));
        }
        out.push_str(".RE\n.fi\n");
    }
    section(&mut out, "SEE ALSO");
    out.push_str(
        "The guide in the source tree, docs/guide/ (the jobs file reference, schedules, agents \
         and budgets, the console's keys, stores, running as a service), and \
         \\fBcronsole COMMAND \\-\\-help\\fR.\n",
    );
    w.write_all(out.as_bytes())?;
    man.render_version_section(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> String {
        let mut out = Vec::new();
        render(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_page_has_its_sections_in_order() {
        let p = page();
        let order = [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH \"DESCRIPTION\"",
            ".SH OPTIONS",
            ".SH \"COMMANDS\"",
            ".SH \"FILES\"",
            ".SH \"ENVIRONMENT\"",
            ".SH \"EXIT STATUS\"",
            ".SH \"EXAMPLES\"",
            ".SH \"SEE ALSO\"",
            ".SH VERSION",
        ];
        let mut at = 0;
        for s in order {
            let i = p[at..]
                .find(s)
                .unwrap_or_else(|| panic!("{s} missing or out of order"));
            at += i + s.len();
        }
    }

    #[test]
    fn every_command_and_its_flags_are_on_the_page() {
        let p = page();
        let cmd = crate::cli::args::command();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            assert!(
                p.contains(&format!("\\fBcronsole {}", sub.get_name())),
                "{} missing",
                sub.get_name()
            );
        }
        for flag in [
            "--attach",
            "--no-gates",
            "--since",
            "--allow-private",
            "--reason",
            "--tag",
        ] {
            assert!(p.contains(flag), "{flag} missing");
        }
    }

    #[test]
    fn no_line_starts_a_request_by_accident() {
        for line in page().lines() {
            if let Some(rest) = line.strip_prefix('.') {
                let req: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                assert!(
                    [
                        "TH", "SH", "PP", "TP", "RS", "RE", "nf", "fi", "IP", "br", "ie", "el",
                    ]
                    .contains(&req.as_str()),
                    "unexpected request line {line:?}"
                );
            }
        }
    }
}
