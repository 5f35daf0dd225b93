//! The `jobs:` list: names (unique), the action, the gate, context, run limits and delivery of
//! each job, then the API-key warning for agents that some job uses.
//!
//! Owns: the keys of a job and how they combine. Must not touch: the schedule grammar (see
//! `schedule`), the shared sections (see `settings`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::checker::{
    Checker, Defaults, JOB_KEYS, MONITOR_KEYS, check_http_url, index, key, kind_of, list, show,
    valid_env_name, valid_name,
};
use crate::config::bounds;
use crate::config::defaults;
use crate::config::yaml::{Mapping, Seg, Value};
use crate::model::{Action, Gate, JobDef, MonitorSource, OnMissingContext, Settings};

use crate::schedule;

impl Checker<'_> {
    pub(crate) fn jobs(
        &mut self,
        top: &Mapping,
        d: &Defaults,
        s: &Settings,
    ) -> Vec<Option<JobDef>> {
        let Some(items) = self.jobs_list(top) else {
            return Vec::new();
        };
        // Pre-pass: names, for duplicate and `context_from` checks.
        let mut names = JobNames::default();
        for (i, item) in items.iter().enumerate() {
            names.add(i, item);
        }
        let mut run = JobsRun::new(names, s);
        let out = items
            .iter()
            .enumerate()
            .map(|(i, item)| self.job_item(&mut run, i, item, d, s))
            .collect();
        self.jobs_end(&run, s);
        out
    }

    /// The `jobs:` list of the top mapping (`None`: no jobs, after recording why when that is
    /// an error).
    pub(crate) fn jobs_list<'v>(&mut self, top: &'v Mapping) -> Option<&'v [Value]> {
        let base = vec![Seg::Key("jobs".into())];
        match top.get("jobs") {
            None => {
                self.error(
                    Vec::new(),
                    "missing required key `jobs` (a list of jobs; `jobs: []` for none)",
                );
                None
            }
            Some(Value::Null) => None,
            Some(Value::Sequence(items)) => Some(items),
            Some(other) => {
                self.error(
                    base,
                    format!(
                        "expected a list of jobs (`- name: …` items), found {}",
                        kind_of(other)
                    ),
                );
                None
            }
        }
    }

    /// Job `i` of the list: checked, and what the whole-list checks need recorded in `run`.
    /// `None` when it has errors.
    pub(crate) fn job_item(
        &mut self,
        run: &mut JobsRun,
        i: usize,
        item: &Value,
        d: &Defaults,
        s: &Settings,
    ) -> Option<JobDef> {
        let p = index(&[Seg::Key("jobs".into())], i);
        let before = self.error_count();
        let job = self.job(item, &p, i, d, s, &run.names.first_index);
        if let Some(j) = &job
            && let Some(a) = j.agent_name()
        {
            run.used_agents
                .entry(a.to_string())
                .or_insert_with(|| j.name.clone());
            // Under a budget an unknown model is never called: its cost could not be counted.
            if let Some(def) = s.agents.get(a)
                && crate::cost::under_budget(s, j.max_cost_usd)
                && !run.prices.knows(&def.model)
                && run.unpriced_warned.insert(a.to_string())
            {
                let ap = vec![Seg::Key("agents".into()), Seg::Key(a.to_string())];
                self.warn(
                    key(&ap, "model"),
                    format!(
                        "runs of job '{}' will fail: {}",
                        j.name,
                        crate::cost::unpriced_under_budget(&def.model)
                    ),
                );
            }
            self.budget_fits_one_call(run, &p, j, a, s);
        }
        let job = if self.error_count() == before {
            job
        } else {
            None
        };
        run.record(i, item, job.as_ref());
        job
    }

    /// A limit below the worst case of one call of job `j` (agent `a`) means the job never
    /// calls its model: warned with the numbers and both fixes (the largest `max_tokens` that
    /// fits, the smallest limit that does). The prompt counted is the instructions, the message
    /// and the definitions of the command tools the job is allowed, as its first request
    /// carries them (`dry-run`'s price); a gate's context, a notepad and MCP tools (known only
    /// from their servers) only add to it, so the real worst case is at least this. The job's
    /// own limit is warned at the job; the global one once per agent.
    fn budget_fits_one_call(
        &mut self,
        run: &mut JobsRun,
        p: &[Seg],
        j: &JobDef,
        a: &str,
        s: &Settings,
    ) {
        let Some(def) = s.agents.get(a) else { return };
        let Some(call) = crate::preflight::definition_call(j, s, &run.prices) else {
            return;
        };
        let (price, max_tokens, bytes, tool_bytes, worst) = (
            call.price,
            call.max_tokens,
            call.prompt_bytes,
            call.tool_bytes,
            call.worst_usd,
        );
        let tools_note = if tool_bytes > 0 {
            format!(", its command tools' definitions ({tool_bytes} bytes) included")
        } else {
            String::new()
        };
        let budget_key = vec![Seg::Key("budget".into()), Seg::Key("max_cost_usd".into())];
        let limits = [
            s.budget
                .filter(|_| run.too_small_warned.insert(a.to_string()))
                .map(|b| {
                    (
                        "global",
                        b.max_cost_usd,
                        b.period,
                        budget_key,
                        "budget.max_cost_usd",
                    )
                }),
            j.max_cost_usd.map(|l| {
                let at = key(p, "max_cost_usd");
                ("job", l, crate::cost::budget_period(s), at, "max_cost_usd")
            }),
        ];
        for (scope, limit, period, at, limit_key) in limits.into_iter().flatten() {
            if worst <= limit {
                continue;
            }
            let (tokens, need) = crate::cost::one_call_fixes(price, bytes, limit, worst);
            let lower = match tokens {
                Some(n) => format!("lower agents.{a}.max_tokens to {n} or less, or "),
                None => String::new(),
            };
            self.warn(
                at,
                format!(
                    "job '{}' never calls its model: {} (model {}, max_tokens {max_tokens}, a \
                     prompt of at least {bytes} bytes{tools_note}); {lower}raise {limit_key} to \
                     {} or more",
                    j.name,
                    crate::cost::too_small_reason(scope, limit, period, worst),
                    def.model,
                    crate::cost::usd_over(need, limit).0
                ),
            );
        }
    }

    /// The checks that need every job (chains of `after:`) and the API-key warnings of the
    /// agents some job uses.
    pub(crate) fn jobs_end(&mut self, run: &JobsRun, s: &Settings) {
        self.after_graph(run);
        for (agent, job) in &run.used_agents {
            let Some(def) = s.agents.get(agent) else {
                continue;
            };
            let short = self
                .env_chars
                .and_then(|f| f(&def.api_key_env))
                .filter(|n| *n > 0 && *n < crate::text::MIN_SECRET_CHARS);
            if let Some(n) = short {
                let p = vec![Seg::Key("agents".into()), Seg::Key(agent.clone())];
                self.warn(
                    key(&p, "api_key_env"),
                    format!(
                        "the value of {} is only {n} characters: too short to be redacted from \
                         results, history and sinks by value (keys of {} or more characters are)",
                        def.api_key_env,
                        crate::text::MIN_SECRET_CHARS
                    ),
                );
            }
            if !(self.env_is_set)(&def.api_key_env) {
                let p = vec![Seg::Key("agents".into()), Seg::Key(agent.clone())];
                self.warn(
                    key(&p, "api_key_env"),
                    format!(
                        "environment variable {} is not set: runs of job '{job}' (and any other \
                         job using agent '{agent}') will fail until it is",
                        def.api_key_env
                    ),
                );
            }
        }
    }

    /// One job: each group of keys is read by its own function, in file-key order, so a
    /// problem in one never hides another.
    pub(super) fn job(
        &mut self,
        v: &Value,
        p: &[Seg],
        i: usize,
        d: &Defaults,
        s: &Settings,
        first_index: &HashMap<String, usize>,
    ) -> Option<JobDef> {
        let m = self.mapping(v, p, "a job")?;
        self.check_keys(m, p, JOB_KEYS);
        let name = self.job_name(m, p, i, first_index);
        let after = self.after(m, p, name.as_deref(), first_index);
        let (sched, tz) = self.job_schedule(m, p, d, &after);
        let action = self.action(m, p, s);
        let gate = self.gate(m, p);
        let (context_from, context_max_chars, on_missing_context) = self.context(m, p, first_index);
        let misfire_grace_seconds = match self.grace(m, p) {
            None => d.misfire_grace_seconds,
            Some(g) => g,
        };
        let (max_runs, until) = self.run_limits(m, p, tz.as_deref());
        self.limit_without_schedule(m, p, max_runs.is_some(), sched.as_ref());
        let run_immediately = self.run_immediately(m, p, d, sched.as_ref());
        let timeout_seconds = self
            .opt_real(m, p, "timeout_seconds", bounds::TIMEOUT_SECONDS)
            .unwrap_or(d.timeout_seconds);
        let max_retries = self
            .opt_whole(m, p, "max_retries", bounds::MAX_RETRIES)
            .map(|x| x as u32)
            .unwrap_or(d.max_retries);
        let lease_seconds = self
            .opt_real(m, p, "lease_seconds", bounds::LEASE_SECONDS)
            .unwrap_or(d.lease_seconds);
        let max_cost_usd = self.opt_real(m, p, "max_cost_usd", bounds::COST_USD);
        let deliver = self.deliver(m, p, s);
        if let Some(Action::Agent { agent, tools, .. }) = &action
            && let Some(def) = s.agents.get(agent)
        {
            self.approval_without_sink(p, def, tools.as_deref(), &deliver);
        }
        let alert_after_failures = self
            .opt_whole(m, p, "alert_after_failures", bounds::ALERT_AFTER_FAILURES)
            .map(|x| x as u32)
            .unwrap_or(1);
        let enabled = self.opt_bool(m, p, "enabled").unwrap_or(true);
        let env_passthrough = self.env_passthrough(m, p);
        let tags = self.tags(m, p);
        let jitter_seconds = self.jitter(m, p, d, sched.as_ref());
        let days = self.day_rule(m, p);
        let own_overlap = self.overlap_keys(m, p);
        let overlap = self.overlap_policy(p, own_overlap, Some(d.overlap));

        let (schedule, schedule_text) = sched?;
        Some(JobDef {
            name: name?,
            schedule,
            schedule_text,
            tz: tz?,
            action: action?,
            gate,
            context_from,
            context_max_chars,
            on_missing_context,
            misfire_grace_seconds,
            max_runs,
            until,
            run_immediately,
            timeout_seconds,
            max_retries,
            lease_seconds,
            max_cost_usd,
            deliver,
            alert_after_failures,
            enabled,
            env_passthrough,
            tags,
            jitter_seconds,
            days,
            overlap,
            after,
        })
    }

    /// The job's schedule with its display text, and its zone: with `after:` the schedule is
    /// optional (without one the job runs after its parents); a one-shot in the past warns.
    fn job_schedule(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        d: &Defaults,
        after: &[crate::model::After],
    ) -> (Option<(schedule::ScheduleSpec, String)>, Option<String>) {
        // A bad schedule does not stop the other checks; `tz` is `None` when the zone itself
        // is bad (reported where it was written), so zone-dependent checks are skipped.
        // With `after:` the schedule is optional: without one the job runs after its parents.
        let (sched, tz) = if Self::get(m, "schedule").is_none() && Self::get(m, "after").is_some() {
            let text = format!(
                "after {}",
                after
                    .iter()
                    .map(|a| format!("{} ({})", a.job, a.on.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            (
                Some((schedule::ScheduleSpec::AfterOnly, text)),
                d.tz.clone(),
            )
        } else {
            self.schedule(m, p, d)
        };
        if let (Some(now), Some((schedule::ScheduleSpec::At { at }, _))) = (self.now, &sched)
            && *at <= now
        {
            self.warn(
                key(p, "schedule"),
                format!(
                    "the instant {} is in the past: stored now, this one-shot job runs once at \
                     the next start, late (a first run is never dropped as missed), then retires",
                    at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
                ),
            );
        }
        (sched, tz)
    }

    /// `run_immediately` for one job. A job with only `after:` has no schedule to start early:
    /// it runs after its parents, so the key (its own or from `defaults:`) is ignored, its own
    /// with a warning, since a run when first stored would spend its only scheduled slot and
    /// retire it before its parents ever finish. A one-shot job with it runs twice, which is
    /// rarely meant, so that is warned about too.
    fn run_immediately(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        d: &Defaults,
        sched: Option<&(schedule::ScheduleSpec, String)>,
    ) -> bool {
        let spec = sched.map(|(s, _)| s);
        let after_only = spec == Some(&schedule::ScheduleSpec::AfterOnly);
        match self.opt_bool(m, p, "run_immediately") {
            Some(true) if after_only => {
                self.warn(
                    key(p, "run_immediately"),
                    "`run_immediately` is ignored on a job with only `after:`: it has no schedule \
                     to start early and runs after each of its parents' runs; remove the key, or \
                     give the job a `schedule` to run it when first stored",
                );
                false
            }
            Some(true) if spec.is_some_and(schedule::ScheduleSpec::is_at) => {
                self.warn(
                    key(p, "run_immediately"),
                    "this one-shot job runs twice: once when first stored (`run_immediately`) \
                     and once at its time; remove `run_immediately` to run it only at its time",
                );
                true
            }
            Some(own) => own,
            None => d.run_immediately && !after_only,
        }
    }

    /// `once`/`max_runs` on a job that has no `schedule` of its own.
    fn limit_without_schedule(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        limited: bool,
        sched: Option<&(schedule::ScheduleSpec, String)>,
    ) {
        // `once`/`max_runs` count scheduled runs; a job with only `after:` has none, so the limit
        // would silently never apply (a `once` job would run after every parent run). Refused at
        // the key.
        if limited && matches!(sched, Some((schedule::ScheduleSpec::AfterOnly, _))) {
            let k = if Self::get(m, "max_runs").is_some() {
                "max_runs"
            } else {
                "once"
            };
            self.error_at_key(
                key(p, k),
                format!(
                    "`{k}` limits scheduled runs, and this job has no `schedule` (it runs only \
                     after its parents), so it would never apply; put the limit on the parent \
                     job, or give this job a `schedule`, or remove `{k}`"
                ),
            );
        }
    }

    /// `tags`: names, each refused when it holds characters that would disguise an output.
    fn tags(&mut self, m: &Mapping, p: &[Seg]) -> Vec<String> {
        // A tag is printed by `jobs`, `describe` and the console: control characters, bidi
        // overrides and invisible characters (the inert-text policy's unsafe set) are refused
        // here, as job names are, rather than stored and escaped at every output.
        let mut tags: Vec<String> = Vec::new();
        for (i, t) in self.opt_name_list(m, p, "tags") {
            if t.chars().any(crate::text::is_unsafe) {
                self.error(
                    index(&key(p, "tags"), i),
                    format!(
                        "invalid tag {}: control, bidirectional and invisible characters are \
                         not allowed in tags",
                        show(&t)
                    ),
                );
            } else {
                tags.push(t);
            }
        }
        tags
    }

    /// `jitter_seconds` (or the default), warned when it reaches the gap between two slots.
    fn jitter(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        d: &Defaults,
        sched: Option<&(schedule::ScheduleSpec, String)>,
    ) -> f64 {
        let jitter_seconds = self
            .opt_real(m, p, "jitter_seconds", bounds::JITTER_SECONDS)
            .unwrap_or(d.jitter_seconds);
        if let Some((schedule::ScheduleSpec::Every { every_seconds }, _)) = sched
            && jitter_seconds >= *every_seconds as f64
        {
            self.warn(
                key(p, "jitter_seconds"),
                format!(
                    "jitter of {jitter_seconds}s is not shorter than the {every_seconds}s \
                     interval: a slot may fire after the next one is due (each slot still fires \
                     once, in order)"
                ),
            );
        }
        if let Some((spec @ schedule::ScheduleSpec::Cron { .. }, _)) = sched
            && jitter_seconds > 0.0
            && let Some(gap) = shortest_cron_gap(spec, jitter_seconds)
        {
            self.warn(
                key(p, "jitter_seconds"),
                format!(
                    "jitter of {jitter_seconds}s is not shorter than the {gap}s between two of \
                     this cron schedule's slots: a slot may fire after the next one is due \
                     (each slot still fires once, in order)"
                ),
            );
        }
        jitter_seconds
    }

    /// `name`: required, a valid name, unique in the file (the second use is the error).
    fn job_name(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        i: usize,
        first_index: &HashMap<String, usize>,
    ) -> Option<String> {
        let name = self.opt_str(m, p, "name");
        match &name {
            None => {
                if Self::get(m, "name").is_none() {
                    self.error(p.to_vec(), "missing required key `name`");
                }
            }
            Some(n) => {
                if !valid_name(n) {
                    self.error(
                        key(p, "name"),
                        format!(
                            "invalid job name {}: use 1–64 characters from A-Z a-z 0-9 . _ -",
                            show(n)
                        ),
                    );
                } else if let Some(&first) = first_index.get(n)
                    && first != i
                {
                    self.error(
                        key(p, "name"),
                        format!(
                            "duplicate job name '{n}': jobs[{first}] already uses it; names \
                             must be unique"
                        ),
                    );
                }
            }
        }
        name
    }

    /// Exactly one of `agent` (a name under `agents:`) and `command`, with the keys that only
    /// apply to one of them (`message`, `command_timeout_seconds`).
    fn action(&mut self, m: &Mapping, p: &[Seg], s: &Settings) -> Option<Action> {
        let agent = self.opt_text(m, p, "agent");
        let command = self.opt_exec(m, p, "command");
        let message = self.opt_str(m, p, "message");
        let command_timeout =
            self.opt_real(m, p, "command_timeout_seconds", bounds::TIMEOUT_SECONDS);
        let has = |k: &str| Self::get(m, k).is_some();
        let tools = self.job_tools(m, p, agent.as_deref().and_then(|a| s.agents.get(a)));
        let agent = match agent {
            Some(a) if !s.agents.contains_key(&a) => {
                let known = if s.agents.is_empty() {
                    "no agents are defined under `agents:`".to_string()
                } else {
                    format!("defined agents: {}", list(s.agents.keys()))
                };
                self.error(
                    key(p, "agent"),
                    format!("unknown agent {}; {known}", show(&a)),
                );
                None
            }
            other => other,
        };
        match (has("agent"), has("command")) {
            (true, true) => {
                self.error_at_key(
                    key(p, "command"),
                    "`agent` and `command` are mutually exclusive: a job either asks an agent \
                     or runs a shell command, keep one",
                );
                None
            }
            (false, false) => {
                // A job with a message (a PraisonAI job, whose agent lives in Python) asks an
                // agent: say which key and where the agent is declared.
                let praisonai = has("agent_id") || has("task");
                let pointer = praisonai || s.agents.is_empty();
                let why = if message.is_some() || praisonai {
                    let names = if s.agents.is_empty() {
                        "declare one under `agents:` (provider, model, instructions)".to_string()
                    } else {
                        format!(
                            "one of: {}",
                            s.agents.keys().cloned().collect::<Vec<_>>().join(", ")
                        )
                    };
                    format!(
                        "missing `agent`: a job with a message asks an agent: add `agent: NAME`, \
                         {names}{}",
                        if pointer {
                            "; a PraisonAI file converts with `cronsole import praisonai FILE`"
                        } else {
                            ""
                        }
                    )
                } else {
                    "missing `agent` or `command`: a job needs exactly one (an `agents:` name, \
                     or a shell command)"
                        .to_string()
                };
                self.error(p.to_vec(), why);
                None
            }
            (true, false) => {
                if command_timeout.is_some() {
                    self.warn(
                        key(p, "command_timeout_seconds"),
                        "ignored: this is an agent job (use timeout_seconds)",
                    );
                }
                agent.map(|agent| Action::Agent {
                    agent,
                    message: message.unwrap_or_default(),
                    tools,
                })
            }
            (false, true) => {
                if has("tools") {
                    self.error_at_key(
                        key(p, "tools"),
                        "`tools` narrows an agent's tools; a `command` job calls no tools",
                    );
                }
                if message.as_deref().is_some_and(|m| !m.is_empty()) {
                    self.warn(
                        key(p, "message"),
                        "ignored: a `command` job delivers its command's output, not a prompt",
                    );
                }
                command.map(|c| Action::Command {
                    command: c,
                    timeout_seconds: command_timeout.unwrap_or(defaults::COMMAND_TIMEOUT_SECONDS),
                })
            }
        }
    }

    /// The gate: `monitor` xor `pre_run`.
    fn gate(&mut self, m: &Mapping, p: &[Seg]) -> Option<Gate> {
        let monitor = match Self::get(m, "monitor") {
            None => None,
            Some(mv) => self.monitor(mv, &key(p, "monitor")),
        };
        let pre_run = self.opt_exec(m, p, "pre_run");
        if Self::get(m, "monitor").is_some() && Self::get(m, "pre_run").is_some() {
            self.error_at_key(
                key(p, "pre_run"),
                "`monitor` and `pre_run` are mutually exclusive: a job has at most one gate",
            );
            None
        } else if let Some(source) = monitor {
            Some(Gate::Monitor { source })
        } else {
            pre_run.map(|command| Gate::PreRun { command })
        }
    }

    /// `context_from` (names of jobs in this file), `context_max_chars`, `on_missing_context`.
    fn context(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        first_index: &HashMap<String, usize>,
    ) -> (Vec<String>, usize, OnMissingContext) {
        let mut context_from = Vec::new();
        for (j, n) in self.opt_name_list(m, p, "context_from") {
            if first_index.contains_key(&n) {
                context_from.push(n);
            } else {
                self.unknown_job = true;
                self.error(
                    index(&key(p, "context_from"), j),
                    format!(
                        "unknown job {} in context_from; jobs in this file: {}",
                        show(&n),
                        list(first_index.keys().collect::<BTreeSet<_>>())
                    ),
                );
            }
        }
        let context_max_chars = self
            .opt_whole(m, p, "context_max_chars", bounds::CONTEXT_MAX_CHARS)
            .map(|x| x as usize)
            .unwrap_or(defaults::CONTEXT_MAX_CHARS);
        let on_missing_context = match self.opt_str(m, p, "on_missing_context") {
            None => OnMissingContext::Run,
            Some(x) => match x.trim().to_ascii_lowercase().as_str() {
                "run" => OnMissingContext::Run,
                "skip" => OnMissingContext::Skip,
                _ => {
                    self.error(
                        key(p, "on_missing_context"),
                        format!("unknown value {}: use run or skip", show(&x)),
                    );
                    OnMissingContext::Run
                }
            },
        };
        (context_from, context_max_chars, on_missing_context)
    }

    /// `max_runs`, `once` (= `max_runs: 1`) and `until` (read in the job's zone, skipped when
    /// the zone is bad).
    fn run_limits(
        &mut self,
        m: &Mapping,
        p: &[Seg],
        tz: Option<&str>,
    ) -> (Option<u64>, Option<chrono::DateTime<chrono::Utc>>) {
        let max_runs = self.opt_whole(m, p, "max_runs", bounds::MAX_RUNS);
        let once = self.opt_bool(m, p, "once").unwrap_or(false);
        let max_runs = match (once, max_runs) {
            (true, Some(n)) if n != 1 => {
                self.error_at_key(
                    key(p, "once"),
                    format!(
                        "`once: true` means `max_runs: 1`, but `max_runs` is {n}; keep one of them"
                    ),
                );
                Some(n)
            }
            (true, _) => Some(1),
            (false, x) => x,
        };
        let until = match self.opt_str(m, p, "until") {
            None => None,
            Some(u) => match tz.map(schedule::parse_tz) {
                None | Some(Err(_)) => None,
                Some(Ok(zone)) => match schedule::grammar::parse_at(&u, zone) {
                    Ok(t) if self.now.is_some_and(|now| t <= now) => {
                        self.warn(
                            key(p, "until"),
                            format!(
                                "until {} is in the past, so the job will not run again",
                                t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                            ),
                        );
                        Some(t)
                    }
                    Ok(t) => Some(t),
                    Err(e) => {
                        self.error(
                            key(p, "until"),
                            format!("{e} (the job's zone is {})", zone.name()),
                        );
                        None
                    }
                },
            },
        };
        (max_runs, until)
    }

    /// `deliver`: names of sinks under `delivery:`.
    fn deliver(&mut self, m: &Mapping, p: &[Seg], s: &Settings) -> Vec<String> {
        let mut deliver = Vec::new();
        for (j, n) in self.opt_name_list(m, p, "deliver") {
            if s.delivery.contains_key(&n) {
                deliver.push(n);
            } else {
                let known = if s.delivery.is_empty() {
                    "no sinks are defined under `delivery:`".to_string()
                } else {
                    format!("defined sinks: {}", list(s.delivery.keys()))
                };
                self.error(
                    index(&key(p, "deliver"), j),
                    format!("unknown sink {}; {known}", show(&n)),
                );
            }
        }
        deliver
    }

    /// `env_passthrough`: names of environment variables.
    fn env_passthrough(&mut self, m: &Mapping, p: &[Seg]) -> Vec<String> {
        let mut out = Vec::new();
        for (j, n) in self.opt_name_list(m, p, "env_passthrough") {
            if valid_env_name(&n) {
                out.push(n);
            } else {
                self.error(
                    index(&key(p, "env_passthrough"), j),
                    "expected the name of an environment variable ([A-Za-z_][A-Za-z0-9_]*)",
                );
            }
        }
        out
    }

    pub(super) fn monitor(&mut self, v: &Value, p: &[Seg]) -> Option<MonitorSource> {
        let m = self.mapping(
            v,
            p,
            "a monitor such as {command: \"df -h /\"} or {url: https://…}",
        )?;
        self.check_keys(m, p, MONITOR_KEYS);
        let command = self.opt_exec(m, p, "command");
        let url = self.opt_text(m, p, "url");
        let allow_private = self.opt_bool(m, p, "allow_private");
        match (command, url) {
            (Some(_), Some(_)) => {
                self.error_at_key(
                    key(p, "url"),
                    "`command` and `url` are mutually exclusive: a monitor watches one source",
                );
                None
            }
            (Some(command), None) => {
                if allow_private.is_some() {
                    self.error_at_key(
                        key(p, "allow_private"),
                        "`allow_private` applies to `url` monitors only",
                    );
                }
                Some(MonitorSource::Command { command })
            }
            (None, Some(url)) => {
                if let Err(e) = check_http_url(&url) {
                    self.error(key(p, "url"), e);
                } else if allow_private != Some(true) {
                    self.private_url(&url, p);
                }
                Some(MonitorSource::Url {
                    url: url.trim().to_string(),
                    allow_private: allow_private.unwrap_or(false),
                })
            }
            (None, None) => {
                if Self::get(m, "command").is_none() && Self::get(m, "url").is_none() {
                    self.error(
                        p.to_vec(),
                        "a monitor needs `command: \"…\"` or `url: https://…`",
                    );
                }
                None
            }
        }
    }
}

/// The name of every job in the list (the first job using each), gathered before the jobs are
/// checked: duplicates, `context_from` and `after:` refer to jobs anywhere in the file.
#[derive(Debug, Default)]
pub(crate) struct JobNames {
    first_index: HashMap<String, usize>,
}

impl JobNames {
    /// Job `i` of the list (its name, when it is text).
    pub(crate) fn add(&mut self, i: usize, item: &Value) {
        if let Some(Value::String(n)) = item.as_mapping().and_then(|m| m.get("name"))
            && !self.first_index.contains_key(n)
        {
            self.first_index.insert(n.clone(), i);
        }
    }
}

/// What the checks of the whole list keep while the jobs are checked one at a time: the names,
/// which jobs validated (and which of those are monitors), the `after:` chains, and the
/// agents used. Everything but the chains is a few bytes per job.
pub(crate) struct JobsRun {
    pub(super) names: JobNames,
    /// Per job: [`VALID`] and [`MONITOR`] bits.
    flags: Vec<u8>,
    /// The valid jobs with `after:` entries, in file order.
    pub(super) chains: Vec<Chain>,
    used_agents: BTreeMap<String, String>,
    unpriced_warned: BTreeSet<String>,
    /// Agents already warned of a global budget too small for one of their calls.
    too_small_warned: BTreeSet<String>,
    prices: crate::cost::PriceTable,
}

const VALID: u8 = 1;
const MONITOR: u8 = 2;

/// A valid job with `after:` entries.
pub(crate) struct Chain {
    /// Its index in the list.
    pub(super) i: usize,
    pub(super) name: String,
    pub(super) after: Vec<crate::model::After>,
    /// `after:` was written as a list (entries are then located by index).
    is_list: bool,
}

impl Chain {
    /// Where entry `k` of its `after:` was written (`jobs[i].after` or `jobs[i].after[k]`).
    pub(crate) fn entry_path(&self, k: usize) -> Vec<Seg> {
        let p = key(&index(&[Seg::Key("jobs".into())], self.i), "after");
        if self.is_list { index(&p, k) } else { p }
    }

    /// Every path the whole-list checks may report about this job.
    pub(crate) fn paths(&self) -> Vec<Vec<Seg>> {
        (0..self.after.len())
            .flat_map(|k| {
                let e = self.entry_path(k);
                [key(&e, "on"), e]
            })
            .collect()
    }
}

impl JobsRun {
    pub(crate) fn new(names: JobNames, s: &Settings) -> JobsRun {
        JobsRun {
            names,
            flags: Vec::new(),
            chains: Vec::new(),
            used_agents: BTreeMap::new(),
            unpriced_warned: BTreeSet::new(),
            too_small_warned: BTreeSet::new(),
            prices: crate::cost::PriceTable::from_settings(s),
        }
    }

    /// Job `i` was checked: `job` is its definition when it is valid.
    fn record(&mut self, i: usize, item: &Value, job: Option<&JobDef>) {
        if self.flags.len() <= i {
            self.flags.resize(i + 1, 0);
        }
        let Some(j) = job else {
            return;
        };
        self.flags[i] = VALID
            | if matches!(j.gate, Some(Gate::Monitor { .. })) {
                MONITOR
            } else {
                0
            };
        if !j.after.is_empty() {
            let is_list = item
                .as_mapping()
                .and_then(|m| m.get("after"))
                .is_some_and(|v| matches!(v, Value::Sequence(_)));
            self.chains.push(Chain {
                i,
                name: j.name.clone(),
                after: j.after.clone(),
                is_list,
            });
        }
    }

    /// Job `i`'s name, for a run made with the names read so far (a one-pass check).
    pub(crate) fn add_name(&mut self, i: usize, item: &Value) {
        self.names.add(i, item);
    }

    /// The names it was made with.
    pub(crate) fn into_names(self) -> JobNames {
        self.names
    }

    /// The most recent chain, when it is job `i`'s.
    pub(crate) fn chain_of(&self, i: usize) -> Option<&Chain> {
        self.chains.last().filter(|c| c.i == i)
    }

    fn flags_of(&self, name: &str) -> u8 {
        self.names
            .first_index
            .get(name)
            .and_then(|i| self.flags.get(*i))
            .copied()
            .unwrap_or(0)
    }

    /// Whether a job of this name validated.
    pub(super) fn is_valid(&self, name: &str) -> bool {
        self.flags_of(name) & VALID != 0
    }

    /// Whether the valid job of this name has a `monitor:` gate.
    pub(super) fn is_monitor(&self, name: &str) -> bool {
        self.flags_of(name) & MONITOR != 0
    }
}

/// Slots of a cron schedule looked at for [`shortest_cron_gap`] (bounded work at validate).
const CRON_GAP_SLOTS: usize = 2000;

/// The first gap in seconds between two consecutive slots of a cron `spec` that is not longer
/// than `jitter`, looking at its first [`CRON_GAP_SLOTS`] slots over at most a year from a
/// fixed instant (so the warning is the same on every run); `None` when there is none.
fn shortest_cron_gap(spec: &schedule::ScheduleSpec, jitter: f64) -> Option<i64> {
    let start = chrono::DateTime::<chrono::Utc>::from_timestamp(1_767_225_600, 0)?; // 2026-01-01
    let end = start + chrono::Duration::days(366);
    let sched = schedule::Compiled::new(spec, start).ok()?;
    let mut prev = sched.next_after(start)?;
    for _ in 0..CRON_GAP_SLOTS {
        let next = sched.next_after(prev)?;
        if next > end {
            return None;
        }
        let gap = (next - prev).num_seconds();
        if gap as f64 <= jitter {
            return Some(gap);
        }
        prev = next;
    }
    None
}
