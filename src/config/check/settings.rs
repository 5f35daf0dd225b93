//! The sections every job refers to: `defaults`, `budget`, `pricing`, `agents`, `delivery`.
//!
//! Owns: their keys, defaults and cross-checks. Must not touch: jobs.

use std::collections::BTreeMap;

use super::checker::{
    AGENT_KEYS, BUDGET_KEYS, Checker, DEFAULT_KEYS, Defaults, PRICE_KEYS, SINK_KEYS,
    check_http_url, key, show, valid_env_name, valid_name,
};
use crate::config::bounds;
use crate::config::defaults;
use crate::config::yaml::{Mapping, Seg, Value, key_text};
use crate::model::{AgentDef, Budget, BudgetPeriod, Price, Provider, SinkDef, WebhookFormat};
use crate::schedule;

impl Checker<'_> {
    pub(super) fn defaults(&mut self, top: &Mapping) -> Defaults {
        let mut d = Defaults {
            tz: Some(defaults::TZ.to_string()),
            timeout_seconds: defaults::TIMEOUT_SECONDS,
            max_retries: defaults::MAX_RETRIES,
            misfire_grace_seconds: None,
            lease_seconds: defaults::LEASE_SECONDS,
            jitter_seconds: 0.0,
            overlap: Default::default(),
            run_immediately: false,
        };
        let base = vec![Seg::Key("defaults".into())];
        let Some(v) = Self::get(top, "defaults") else {
            return d;
        };
        let Some(m) = self.mapping(v, &base, "`defaults`") else {
            return d;
        };
        self.check_keys(m, &base, DEFAULT_KEYS);
        if let Some(tz) = self.opt_str(m, &base, "tz") {
            match schedule::parse_tz(&tz) {
                Ok(z) => d.tz = Some(z.name().to_string()),
                Err(e) => {
                    self.error(key(&base, "tz"), e.to_string());
                    d.tz = None;
                }
            }
        }
        if let Some(x) = self.opt_real(m, &base, "timeout_seconds", bounds::TIMEOUT_SECONDS) {
            d.timeout_seconds = x;
        }
        if let Some(x) = self.opt_whole(m, &base, "max_retries", bounds::MAX_RETRIES) {
            d.max_retries = x as u32;
        }
        if let Some(g) = self.grace(m, &base) {
            d.misfire_grace_seconds = g;
        }
        if let Some(x) = self.opt_real(m, &base, "lease_seconds", bounds::LEASE_SECONDS) {
            d.lease_seconds = x;
        }
        if let Some(x) = self.opt_real(m, &base, "jitter_seconds", bounds::JITTER_SECONDS) {
            d.jitter_seconds = x;
        }
        if let Some(x) = self.opt_bool(m, &base, "run_immediately") {
            d.run_immediately = x;
        }
        let own = self.overlap_keys(m, &base);
        d.overlap = self.overlap_policy(&base, own, None);
        d
    }

    /// Absent → $1.00/day; `budget: null` → disabled; `max_cost_usd: null` → disabled, but
    /// `period` still sets the period of per-job `max_cost_usd`.
    pub(super) fn budget(&mut self, top: &Mapping) -> (Option<Budget>, BudgetPeriod) {
        let default = Budget {
            max_cost_usd: defaults::BUDGET_USD,
            period: BudgetPeriod::Day,
        };
        let base = vec![Seg::Key("budget".into())];
        let v = match top.get("budget") {
            None => return (Some(default), BudgetPeriod::Day),
            Some(Value::Null) => return (None, BudgetPeriod::Day),
            Some(v) => v,
        };
        let Some(m) = self.mapping(v, &base, "`budget` (or null to disable it)") else {
            return (Some(default), BudgetPeriod::Day);
        };
        self.check_keys(m, &base, BUDGET_KEYS);
        let period = match self.opt_str(m, &base, "period") {
            None => BudgetPeriod::Day,
            Some(p) => match p.trim().to_ascii_lowercase().as_str() {
                "day" => BudgetPeriod::Day,
                "week" => BudgetPeriod::Week,
                "month" => BudgetPeriod::Month,
                "total" => BudgetPeriod::Total,
                _ => {
                    self.error(
                        key(&base, "period"),
                        format!("unknown period {}: use day, week, month or total", show(&p)),
                    );
                    BudgetPeriod::Day
                }
            },
        };
        let budget = match m.get("max_cost_usd") {
            Some(Value::Null) => None,
            None => Some(Budget {
                max_cost_usd: defaults::BUDGET_USD,
                period,
            }),
            Some(_) => self
                .opt_real(m, &base, "max_cost_usd", bounds::COST_USD)
                .map(|max_cost_usd| Budget {
                    max_cost_usd,
                    period,
                }),
        };
        (budget, period)
    }

    /// The named entries of a top-level `section:` mapping (`agents`, `delivery`, `pricing`): each
    /// name with its key path and value. Non-text keys are reported, `x-*` keys skipped, and with
    /// `check_name` an invalid name is reported (the entry is still returned, so its body gets
    /// checked too).
    pub(super) fn named_entries<'m>(
        &mut self,
        top: &'m Mapping,
        section: &str,
        shape: &str,
        noun: &str,
        check_name: bool,
    ) -> Vec<(String, Vec<Seg>, &'m Value)> {
        let base = vec![Seg::Key(section.into())];
        let Some(v) = Self::get(top, section) else {
            return Vec::new();
        };
        let Some(m) = self.mapping(v, &base, &format!("`{section}` ({shape})")) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in m {
            let Some(name) = key_text(k) else {
                self.error(
                    base.clone(),
                    format!("{noun} names must be plain text keys"),
                );
                continue;
            };
            if name.starts_with("x-") {
                continue;
            }
            let p = key(&base, &name);
            if check_name && !valid_name(&name) {
                self.error_at_key(
                    p.clone(),
                    format!(
                        "invalid {noun} name {}: use 1–64 characters from A-Z a-z 0-9 . _ -",
                        show(&name)
                    ),
                );
            }
            out.push((name, p, v));
        }
        out
    }

    pub(super) fn pricing(&mut self, top: &Mapping) -> BTreeMap<String, Price> {
        let mut out = BTreeMap::new();
        for (model, p, v) in self.named_entries(
            top,
            "pricing",
            "model name → {input, output}",
            "model",
            false,
        ) {
            let Some(pm) = self.mapping(v, &p, "a price such as {input: 0.15, output: 0.60}")
            else {
                continue;
            };
            self.check_keys(pm, &p, PRICE_KEYS);
            let input = self.opt_real(pm, &p, "input", bounds::PRICE_USD);
            let output = self.opt_real(pm, &p, "output", bounds::PRICE_USD);
            for (name, got) in [("input", input), ("output", output)] {
                if got.is_none() && Self::get(pm, name).is_none() {
                    self.error(
                        p.clone(),
                        format!("missing required key `{name}` (USD per 1M tokens)"),
                    );
                }
            }
            // Prompt-cache prices are optional: a missing one falls back as `Price` documents.
            let cached_input = self.opt_real(pm, &p, "cached_input", bounds::PRICE_USD);
            let cache_read = self.opt_real(pm, &p, "cache_read", bounds::PRICE_USD);
            let cache_write = self.opt_real(pm, &p, "cache_write", bounds::PRICE_USD);
            if let (Some(input), Some(output)) = (input, output) {
                out.insert(
                    model,
                    Price {
                        input,
                        output,
                        cached_input,
                        cache_read,
                        cache_write,
                    },
                );
            }
        }
        out
    }

    pub(super) fn agents(&mut self, top: &Mapping) -> BTreeMap<String, AgentDef> {
        let mut out = BTreeMap::new();
        for (name, p, v) in
            self.named_entries(top, "agents", "agent name → settings", "agent", true)
        {
            if let Some(a) = self.agent(&name, v, &p) {
                out.insert(name, a);
            }
        }
        out
    }

    pub(super) fn agent(&mut self, name: &str, v: &Value, p: &[Seg]) -> Option<AgentDef> {
        let m = self.mapping(v, p, "an agent")?;
        self.check_keys(m, p, AGENT_KEYS);
        let provider = match self.opt_str(m, p, "provider") {
            None => Provider::Openai,
            Some(s) => match s.trim().to_ascii_lowercase().as_str() {
                "openai" => Provider::Openai,
                "anthropic" => Provider::Anthropic,
                _ => {
                    self.error(
                        key(p, "provider"),
                        format!(
                            "unknown provider {}: use openai (any OpenAI-compatible \
                             /chat/completions API) or anthropic",
                            show(&s)
                        ),
                    );
                    Provider::Openai
                }
            },
        };
        let base_url = match self.opt_text(m, p, "base_url") {
            // Empty = the provider default, or $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL at run time.
            None => String::new(),
            Some(u) => {
                if let Err(e) = check_http_url(&u) {
                    self.error(key(p, "base_url"), e);
                }
                u.trim().trim_end_matches('/').to_string()
            }
        };
        let api_key_env = match self.opt_text(m, p, "api_key_env") {
            None => match provider {
                Provider::Openai => "OPENAI_API_KEY".to_string(),
                Provider::Anthropic => "ANTHROPIC_API_KEY".to_string(),
            },
            Some(s) => {
                if !valid_env_name(&s) {
                    // Never echo the value: it may be a key pasted in by mistake.
                    self.error(
                        key(p, "api_key_env"),
                        "must be the *name* of an environment variable \
                         ([A-Za-z_][A-Za-z0-9_]*, e.g. OPENAI_API_KEY), never the key itself",
                    );
                }
                s
            }
        };
        let model = self.opt_text(m, p, "model");
        if model.is_none() && Self::get(m, "model").is_none() {
            self.error(
                p.to_vec(),
                format!("agent '{name}' is missing required key `model` (e.g. model: gpt-4o-mini)"),
            );
        }
        let instructions = self.opt_str(m, p, "instructions").unwrap_or_default();
        let max_tokens = self
            .opt_whole(m, p, "max_tokens", bounds::MAX_TOKENS)
            .map(|x| x as u32);
        let temperature = self.opt_real(m, p, "temperature", bounds::TEMPERATURE);
        let (tools, approve, limits) = self.agent_tools(m, p);
        Some(AgentDef {
            name: name.to_string(),
            provider,
            base_url,
            api_key_env,
            model: model?,
            instructions,
            max_tokens,
            temperature,
            tools,
            approve,
            limits,
        })
    }

    pub(super) fn delivery(&mut self, top: &Mapping) -> BTreeMap<String, SinkDef> {
        let mut out = BTreeMap::new();
        for (name, p, v) in self.named_entries(top, "delivery", "sink name → sink", "sink", true)
        {
            let Some(sm) = self.mapping(
                v,
                &p,
                "a sink such as {webhook: URL, format: slack} or {file: PATH}",
            ) else {
                continue;
            };
            self.check_keys(sm, &p, SINK_KEYS);
            let webhook = self.opt_text(sm, &p, "webhook");
            let file = self.opt_text(sm, &p, "file");
            let format = match self.opt_str(sm, &p, "format") {
                None => None,
                Some(f) => match f.trim().to_ascii_lowercase().as_str() {
                    "json" => Some(WebhookFormat::Json),
                    "slack" => Some(WebhookFormat::Slack),
                    "discord" => Some(WebhookFormat::Discord),
                    _ => {
                        self.error(
                            key(&p, "format"),
                            format!("unknown format {}: use json, slack or discord", show(&f)),
                        );
                        None
                    }
                },
            };
            let sink = match (webhook, file) {
                (Some(_), Some(_)) => {
                    self.error(
                        key(&p, "file"),
                        "`webhook` and `file` are mutually exclusive: a sink is one or the other",
                    );
                    None
                }
                (Some(url), None) => {
                    if let Err(e) = check_http_url(&url) {
                        self.error(key(&p, "webhook"), e);
                    }
                    Some(SinkDef::Webhook {
                        name: name.clone(),
                        url: url.trim().to_string(),
                        format: format.unwrap_or_default(),
                    })
                }
                (None, Some(path)) => {
                    if Self::get(sm, "format").is_some() {
                        self.error(
                            key(&p, "format"),
                            "`format` applies to `webhook` sinks only; a `file` sink writes \
                             one JSON line per delivery",
                        );
                    }
                    Some(SinkDef::File {
                        name: name.clone(),
                        path,
                    })
                }
                (None, None) => {
                    if Self::get(sm, "webhook").is_none() && Self::get(sm, "file").is_none() {
                        self.error(
                            p.clone(),
                            format!("sink '{name}' needs `webhook: URL` or `file: PATH`"),
                        );
                    }
                    None
                }
            };
            if let Some(s) = sink {
                out.insert(name, s);
            }
        }
        out
    }
}
