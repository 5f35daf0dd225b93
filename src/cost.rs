//! Cost and budgets: the built-in price table, model-name resolution, turning a
//! reply's token usage into dollars, the worst-case cost a call reserves, and the texts budgets
//! speak in.
//!
//! Owns: prices (USD per 1M tokens), [`PriceTable::resolve`], [`run_cost`], [`call_cost`] (what a
//! reply is booked at: the requested model's price, never above the reservation),
//! [`worst_case_usd`], [`budget_check`], [`usd`] (how money is shown). Must
//! not touch: the store (the caller passes [`SpendNow`] in and records the cost; reservations live
//! in `store::policy::budget`), the network, clocks (`now` is an argument).
//!
//! Decisions:
//! - Name resolution is case-insensitive and tries, in order: exact → provider prefix stripped
//!   (everything up to the last `/`) → date suffix stripped (`-YYYY-MM-DD`, `-YYYYMMDD`,
//!   `@YYYYMMDD`, `-latest`, `-MM-DD` after a `preview`) → the alias table ([`ALIASES`], forms
//!   providers document for the same model, e.g. `claude-sonnet-4-0`). Nothing else: a name that
//!   only shares a prefix with a priced model (`o3-pro`, `o1-pro`, `gpt-4o-audio-…`,
//!   `gpt-4o-mini-search-preview`) is **unpriced** unless the table or `pricing:` names it
//!   (prefix pricing would let `o1-pro` through at a tenth of its price).
//! - "Absurd" token counts: negative, or more than [`MAX_PLAUSIBLE_TOKENS`] (100 M) in one call.
//!   They are clamped to 0 and the run is marked unpriced (its real spend is unknown).
//! - A reply without usage, an unknown model, and a clamped count all give cost 0 and
//!   `unpriced: true`, with a reason naming which — except a reserved call's reply (a budget
//!   applies), booked at its reservation by [`call_cost`]: the figure the budget counts.
//! - Budget limits are inclusive: spend at or over the limit skips; a limit of 0 forbids every
//!   call. The per-job limit uses the global budget's period, or `Settings.period` when the
//!   global budget is disabled.
//! - Worst case of one call ([`worst_case_usd`]): every byte of the system instructions and the
//!   prompt counted as one input token (no tokenizer in use emits fewer than one byte per token)
//!   plus [`MESSAGE_OVERHEAD_TOKENS`], and the request's max output tokens, at the model's price.
//! - A reply is priced at the model the request named when the table knows it (the reservation
//!   was computed at that price), and booked at no more than the call's reservation; above it, the
//!   reservation is booked and the reason gives the reply's figures ([`call_cost`]).
//! - Money is shown one way everywhere ([`usd`]): cents from $1 up, three significant digits
//!   below it (`$12.40`, `$0.381`, `$0.00123`, `$0.0000245`): the same amount reads the same on
//!   every surface, and a $0.001 budget is never "$0.00".

use std::collections::BTreeMap;

use crate::model::{BudgetPeriod, Price, Settings};

/// More tokens than this in one call is treated as a corrupt count (clamped to 0).
pub const MAX_PLAUSIBLE_TOKENS: i64 = 100_000_000;

/// Built-in prices, USD per 1M tokens (input, output), compiled on 2026-11-30.
///
/// Premium and special-purpose variants have their own entries (they are not their base model's
/// price: `o1-pro` costs 10× `o1`); a variant missing here is unpriced, never the base price.
///
/// Sources: OpenAI's pricing page as quoted by several 2026 price round-ups (GPT-5.x, 4.1, 4o,
/// o-series agree across sources); Anthropic model pages and docs (Claude 3.x, 4, 4.5 family);
/// Google's Gemini API pricing as quoted by the `gemini-cost` crate docs (≤200k-token tier).
/// Not verified against a first-party page (third-party figures or list prices that vary by
/// host): `claude-sonnet-5`, the `gpt-5.4`/`gpt-5.1` entries, every Gemini entry, and every open
/// model (`llama-*`, `mistral-*`, `deepseek-*`, `qwen*`) whose price depends on the host serving
/// it. Override any of these with `pricing:` in the jobs file.
const BUILTIN: &[(&str, f64, f64)] = &[
    // OpenAI
    ("gpt-5.4", 2.50, 15.00),
    ("gpt-5.1", 1.25, 10.00),
    ("gpt-5", 1.25, 10.00),
    ("gpt-5-mini", 0.25, 2.00),
    ("gpt-5-nano", 0.05, 0.40),
    ("gpt-5-pro", 15.00, 120.00),
    ("gpt-5-codex", 1.25, 10.00),
    ("gpt-5-chat", 1.25, 10.00),
    ("gpt-4.5-preview", 75.00, 150.00),
    ("gpt-4.1", 2.00, 8.00),
    ("gpt-4.1-mini", 0.40, 1.60),
    ("gpt-4.1-nano", 0.10, 0.40),
    ("gpt-4o", 2.50, 10.00),
    ("gpt-4o-mini", 0.15, 0.60),
    // Text-token prices of the audio/search variants (audio tokens are billed higher and are
    // not reported apart by the chat endpoint: override with `pricing:` if you send audio).
    ("gpt-4o-audio-preview", 2.50, 10.00),
    ("gpt-4o-mini-audio-preview", 0.15, 0.60),
    ("gpt-4o-search-preview", 2.50, 10.00),
    ("gpt-4o-mini-search-preview", 0.15, 0.60),
    ("gpt-4-turbo", 10.00, 30.00),
    ("gpt-4", 30.00, 60.00),
    ("gpt-3.5-turbo", 0.50, 1.50),
    ("o1", 15.00, 60.00),
    ("o1-preview", 15.00, 60.00),
    ("o1-pro", 150.00, 600.00),
    ("o1-mini", 1.10, 4.40),
    ("o3", 2.00, 8.00),
    ("o3-pro", 20.00, 80.00),
    ("o3-deep-research", 10.00, 40.00),
    ("o3-mini", 1.10, 4.40),
    ("o4-mini", 1.10, 4.40),
    ("o4-mini-deep-research", 2.00, 8.00),
    // Anthropic
    ("claude-sonnet-5", 2.00, 10.00),
    ("claude-opus-4-5", 5.00, 25.00),
    ("claude-sonnet-4-5", 3.00, 15.00),
    ("claude-haiku-4-5", 1.00, 5.00),
    ("claude-opus-4-1", 15.00, 75.00),
    ("claude-opus-4", 15.00, 75.00),
    ("claude-sonnet-4", 3.00, 15.00),
    ("claude-3-7-sonnet", 3.00, 15.00),
    ("claude-3-5-sonnet", 3.00, 15.00),
    ("claude-3-5-haiku", 0.80, 4.00),
    ("claude-3-opus", 15.00, 75.00),
    ("claude-3-haiku", 0.25, 1.25),
    // Google
    ("gemini-2.5-pro", 1.25, 10.00),
    ("gemini-2.5-flash", 0.30, 2.50),
    ("gemini-2.5-flash-lite", 0.10, 0.40),
    ("gemini-2.0-flash", 0.10, 0.40),
    ("gemini-2.0-flash-lite", 0.075, 0.30),
    ("gemini-1.5-pro", 1.25, 5.00),
    ("gemini-1.5-flash", 0.075, 0.30),
    // Open models (typical hosted list prices; local runs should be overridden to 0)
    ("llama-3.3-70b", 0.59, 0.79),
    ("llama-3.1-8b", 0.05, 0.08),
    ("llama-3.1-70b", 0.59, 0.79),
    ("deepseek-chat", 0.27, 1.10),
    ("deepseek-reasoner", 0.55, 2.19),
    ("mistral-large", 2.00, 6.00),
    ("mistral-small", 0.20, 0.60),
    ("qwen2.5-72b", 0.40, 1.20),
];

/// OpenAI's prompt-cache prices, USD per 1M cached input tokens (`cached_input`), compiled on
/// 2026-11-30 from the same sources as [`BUILTIN`]. A model missing here prices its
/// cached tokens at the full input price (an over-count, never an under-count).
const OPENAI_CACHED_INPUT: &[(&str, f64)] = &[
    ("gpt-5.4", 0.25),
    ("gpt-5.1", 0.125),
    ("gpt-5", 0.125),
    ("gpt-5-mini", 0.025),
    ("gpt-5-nano", 0.005),
    ("gpt-5-codex", 0.125),
    ("gpt-5-chat", 0.125),
    ("gpt-4.1", 0.50),
    ("gpt-4.1-mini", 0.10),
    ("gpt-4.1-nano", 0.025),
    ("gpt-4o", 1.25),
    ("gpt-4o-mini", 0.075),
    ("o1", 7.50),
    ("o1-mini", 0.55),
    ("o3", 0.50),
    ("o3-mini", 0.55),
    ("o4-mini", 0.275),
];

/// Anthropic's prompt-cache multipliers of the input price: reads cost a tenth, writes (the
/// five-minute cache, the one a plain `cache_control` asks for) a quarter more.
const ANTHROPIC_CACHE_READ: f64 = 0.1;
const ANTHROPIC_CACHE_WRITE: f64 = 1.25;

/// Documented alternative names of priced models (alias → table entry). Only names the
/// providers themselves publish for the same model; never a "family" guess.
pub const ALIASES: &[(&str, &str)] = &[
    ("chatgpt-4o", "gpt-4o"),
    ("gpt-4-turbo-preview", "gpt-4-turbo"),
    ("claude-sonnet-4-0", "claude-sonnet-4"),
    ("claude-opus-4-0", "claude-opus-4"),
    ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
    ("claude-3-5-sonnet-latest", "claude-3-5-sonnet"),
    ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
    ("claude-3-opus-latest", "claude-3-opus"),
];

/// Tokens added to a prompt's byte count for message framing in [`worst_case_usd`].
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 64;

/// Output bound sent with every request that a budget covers when the agent sets no
/// `max_tokens` (and Anthropic's required `max_tokens` default).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Token counts as a provider reported them (raw: may be negative or absurd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenUsage {
    pub input: i64,
    pub output: i64,
}

/// Prompt-cache token counts as a provider reported them (raw: may be negative or absurd).
/// OpenAI's cached tokens are a *part* of its prompt tokens; Anthropic's cache reads and writes
/// come *on top of* its input tokens. [`run_cost_cached`] counts each token once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheTokens {
    /// OpenAI `usage.prompt_tokens_details.cached_tokens` (included in the input count).
    pub cached_input: i64,
    /// Anthropic `usage.cache_read_input_tokens` (not included in the input count).
    pub cache_read: i64,
    /// Anthropic `usage.cache_creation_input_tokens` (not included in the input count).
    pub cache_write: i64,
}

/// A price table: the built-in prices merged with `Settings.pricing` (overrides win).
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    /// Lowercased model name → price.
    prices: BTreeMap<String, Price>,
}

/// A resolved price and the table entry it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub name: String,
    pub price: Price,
}

impl PriceTable {
    pub fn builtin() -> PriceTable {
        PriceTable {
            prices: BUILTIN
                .iter()
                .map(|(n, i, o)| {
                    let mut p = Price::new(*i, *o);
                    if n.starts_with("claude-") {
                        p.cache_read = Some(i * ANTHROPIC_CACHE_READ);
                        p.cache_write = Some(i * ANTHROPIC_CACHE_WRITE);
                    }
                    p.cached_input = OPENAI_CACHED_INPUT
                        .iter()
                        .find(|(m, _)| m == n)
                        .map(|(_, c)| *c);
                    (n.to_string(), p)
                })
                .collect(),
        }
    }

    /// The built-in table extended/overridden by the jobs file's `pricing:`.
    pub fn with_overrides(overrides: &BTreeMap<String, Price>) -> PriceTable {
        let mut t = PriceTable::builtin();
        for (name, price) in overrides {
            t.prices.insert(name.trim().to_ascii_lowercase(), *price);
        }
        t
    }

    pub fn from_settings(settings: &Settings) -> PriceTable {
        PriceTable::with_overrides(&settings.pricing)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.prices.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// Find the price for `model` (see the module doc for the order); `None` = unpriced.
    pub fn resolve(&self, model: &str) -> Option<Resolved> {
        let lower = model.trim().to_ascii_lowercase();
        if lower.is_empty() {
            return None;
        }
        let hit = |name: &str| {
            self.prices.get(name).map(|p| Resolved {
                name: name.to_string(),
                price: *p,
            })
        };
        if let Some(r) = hit(&lower) {
            return Some(r);
        }
        let unprefixed = match lower.rsplit_once('/') {
            Some((_, rest)) if !rest.is_empty() => rest.to_string(),
            _ => lower.clone(),
        };
        if let Some(r) = hit(&unprefixed) {
            return Some(r);
        }
        let undated = strip_date_suffix(&unprefixed);
        if let Some(r) = hit(undated) {
            return Some(r);
        }
        ALIASES
            .iter()
            .find(|(alias, _)| *alias == undated || *alias == unprefixed)
            .and_then(|(_, target)| hit(target))
    }

    /// The entry whose name is the longest start of `model` (lowercased, provider prefix
    /// dropped) at a `-` boundary: `gpt-4o-mini-2024-07-18-turbo` → `gpt-4o-mini`. For a
    /// suggestion only, never for pricing a call (a longer name may be another model).
    pub fn closest(&self, model: &str) -> Option<Resolved> {
        let lower = model.trim().to_ascii_lowercase();
        let name = lower.rsplit_once('/').map_or(lower.as_str(), |(_, r)| r);
        self.prices
            .iter()
            .filter(|(k, _)| {
                name.strip_prefix(k.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
            })
            .max_by_key(|(k, _)| k.len())
            .map(|(k, p)| Resolved {
                name: k.clone(),
                price: *p,
            })
    }

    /// Whether the jobs file's `pricing:` (or the built-in table) names `model` by one of the
    /// forms [`PriceTable::resolve`] accepts.
    pub fn knows(&self, model: &str) -> bool {
        self.resolve(model).is_some()
    }
}

/// `gpt-4o-mini-2024-07-18` → `gpt-4o-mini`; `claude-3-5-haiku-20241022` → `claude-3-5-haiku`;
/// `…@20241022` and `…-latest` likewise; `gpt-4o-audio-preview-12-17` → `gpt-4o-audio-preview`.
/// Anything else is returned unchanged.
fn strip_date_suffix(name: &str) -> &str {
    if let Some(rest) = name.strip_suffix("-latest") {
        return rest;
    }
    let b = name.as_bytes();
    let all_digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    // -preview-MM-DD (OpenAI's dated previews)
    if b.len() > 14 && b[..b.len() - 6].ends_with(b"-preview") {
        let tail = &b[b.len() - 6..];
        if tail[0] == b'-' && all_digits(&tail[1..3]) && tail[3] == b'-' && all_digits(&tail[4..6])
        {
            return &name[..name.len() - 6];
        }
    }
    // -YYYY-MM-DD
    if b.len() > 11 {
        let tail = &b[b.len() - 11..];
        if tail[0] == b'-'
            && all_digits(&tail[1..5])
            && tail[5] == b'-'
            && all_digits(&tail[6..8])
            && tail[8] == b'-'
            && all_digits(&tail[9..11])
        {
            return &name[..name.len() - 11];
        }
    }
    // -YYYYMMDD or @YYYYMMDD
    if b.len() > 9 {
        let tail = &b[b.len() - 9..];
        if (tail[0] == b'-' || tail[0] == b'@') && all_digits(&tail[1..]) && tail[1] == b'2' {
            return &name[..name.len() - 9];
        }
    }
    name
}

/// Negative or absurd (> [`MAX_PLAUSIBLE_TOKENS`]) counts become 0; the flag says it happened.
pub fn clamp_tokens(raw: i64) -> (u64, bool) {
    if (0..=MAX_PLAUSIBLE_TOKENS).contains(&raw) {
        (raw as u64, false)
    } else {
        (0, true)
    }
}

/// What one run cost, ready for the history row.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunCost {
    /// Every prompt token the model read, whatever its cache class.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of [`RunCost::input_tokens`], those read from a prompt cache (OpenAI cached tokens,
    /// Anthropic cache reads).
    pub cache_read_tokens: u64,
    /// Of [`RunCost::input_tokens`], those written to Anthropic's prompt cache.
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
    /// The spend is incomplete (unknown model, no usage, or a clamped count).
    pub unpriced: bool,
    /// Why it is unpriced ("unpriced model", "no usage in reply", …).
    pub reason: Option<String>,
    /// The table entry used, if any.
    pub priced_as: Option<String>,
}

/// Cost of one reply from `model` with `usage` (`None` = the provider sent no usage).
#[cfg(any(test, feature = "testkit"))]
pub fn run_cost(table: &PriceTable, model: &str, usage: Option<TokenUsage>) -> RunCost {
    run_cost_cached(table, model, usage, CacheTokens::default())
}

/// [`run_cost`] with the reply's prompt-cache counts: OpenAI's cached tokens are taken out of
/// the input count and priced at `cached_input`; Anthropic's cache reads and writes are added
/// to it and priced at `cache_read` / `cache_write` (each price falling back as
/// [`Price`] documents). Every token is priced once.
pub fn run_cost_cached(
    table: &PriceTable,
    model: &str,
    usage: Option<TokenUsage>,
    cache: CacheTokens,
) -> RunCost {
    let Some(usage) = usage else {
        return RunCost {
            unpriced: true,
            reason: Some("no usage in reply".to_string()),
            ..RunCost::default()
        };
    };
    let (input, bad_in) = clamp_tokens(usage.input);
    let (output, bad_out) = clamp_tokens(usage.output);
    let (cached, bad_cached) = clamp_tokens(cache.cached_input);
    let (read, bad_read) = clamp_tokens(cache.cache_read);
    let (write, bad_write) = clamp_tokens(cache.cache_write);
    // A cached part larger than the whole is a corrupt count: the whole is priced in full.
    let cached = if cached > input { 0 } else { cached };
    let clamped = bad_in || bad_out || bad_cached || bad_read || bad_write;
    let base = RunCost {
        input_tokens: input + read + write,
        output_tokens: output,
        cache_read_tokens: cached + read,
        cache_write_tokens: write,
        ..RunCost::default()
    };
    let Some(resolved) = table.resolve(model) else {
        return RunCost {
            unpriced: true,
            reason: Some("unpriced model".to_string()),
            ..base
        };
    };
    let p = resolved.price;
    let cost = ((input - cached) as f64 * p.input
        + cached as f64 * p.cached_input.unwrap_or(p.input)
        + read as f64 * p.cache_read.unwrap_or(p.input)
        + write as f64 * p.cache_write.unwrap_or(p.input * ANTHROPIC_CACHE_WRITE)
        + output as f64 * p.output)
        / 1_000_000.0;
    // A negative or non-finite override must not produce negative or NaN spend.
    let cost = if cost.is_finite() && cost > 0.0 {
        cost
    } else {
        0.0
    };
    RunCost {
        cost_usd: cost,
        unpriced: clamped,
        reason: clamped.then(|| "implausible token count clamped to 0".to_string()),
        priced_as: Some(resolved.name),
        ..base
    }
}

/// What a reserved call's reply is booked at ([`call_cost`] explains the rules).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Booking<'a> {
    /// The model the request asked for (what the reservation priced).
    pub requested: &'a str,
    /// The model the reply names (may be a dated snapshot, a router's pick, or a lie).
    pub replied: &'a str,
    /// The reply's usage (`None` = the provider sent none).
    pub usage: Option<TokenUsage>,
    /// The reply's prompt-cache counts.
    pub cache: CacheTokens,
    /// The reservation made before the call (its worst case), when a budget applies.
    pub reserved: Option<f64>,
    /// The output bound the request carried, when a budget applies.
    pub max_tokens: Option<u32>,
}

/// The cost of one reply as booked (history row, budget settlement), never above what was
/// reserved for the call:
/// - priced at the **requested** model when the table knows it (the reservation was computed at
///   that price; a reply naming a pricier model, e.g. a router's `o1-pro`, does not raise it);
///   the reply's model is used only when the requested one is unpriced (no budget applies then);
/// - a reply claiming more output than the request allowed, or whose usage prices above the
///   reservation (more input tokens than the prompt's bytes allow), is booked **at the
///   reservation** and the reason says so with the figures;
/// - a reserved reply whose cost is unknown (no usage, a count clamped to 0) is booked **at the
///   reservation** too — the money the budget counts for it — and is not marked unpriced (the
///   figure is an upper bound, not an undercount); the reason says why.
pub fn call_cost(table: &PriceTable, b: Booking<'_>) -> RunCost {
    let requested = table.resolve(b.requested);
    let model = if requested.is_some() {
        b.requested
    } else {
        b.replied
    };
    let mut c = run_cost_cached(table, model, b.usage, b.cache);
    let mut notes = Vec::new();
    if let Some(req) = &requested
        && let Some(rep) = table.resolve(b.replied)
        && rep.name != req.name
    {
        notes.push(format!(
            "reply names model '{}'; priced as the requested '{}'",
            b.replied, b.requested
        ));
    }
    if let Some(w) = b.reserved {
        let over_output = b.max_tokens.is_some_and(|m| c.output_tokens > u64::from(m));
        if over_output || c.cost_usd > w * (1.0 + 1e-9) {
            let what = match b.max_tokens {
                Some(m) if over_output => format!(
                    "reply reports {} output tokens, more than the request allowed ({m})",
                    c.output_tokens
                ),
                _ => format!(
                    "usage above the worst case ({} input, {} output tokens)",
                    c.input_tokens, c.output_tokens
                ),
            };
            notes.push(format!(
                "{what}: booked at the reservation {} instead of {}",
                usd(w),
                usd(c.cost_usd)
            ));
            c.cost_usd = w;
        } else {
            // Float noise only: never a hair above the reservation either.
            c.cost_usd = c.cost_usd.min(w);
        }
        // No usage, or a count clamped to 0: the real cost is unknown, and the budget keeps the
        // call's worst case. The row books that same figure (not $0 beside a worst case the
        // budget still counts), and the reason says why.
        if c.unpriced && requested.is_some() {
            let why = c
                .reason
                .take()
                .unwrap_or_else(|| "cost unknown".to_string());
            notes.push(format!("{why}: booked at the reservation {}", usd(w)));
            c.cost_usd = w;
            c.unpriced = false;
        }
    }
    if !notes.is_empty() {
        notes.extend(c.reason.take());
        c.reason = Some(notes.join("; "));
    }
    c
}

/// One model's price for a run, resolved once: what every request of the run sends as its
/// output bound, reserves before it is sent, and books when it is answered. It keeps the
/// resolution, the worst case and the booking rules in one value, so a caller asks for each
/// figure once per request instead of carrying the pieces back and forth.
#[derive(Debug, Clone)]
pub struct Quote {
    table: PriceTable,
    /// The model the requests name (what is priced).
    pub requested: String,
    /// Its price; `None` when unpriced (possible only when no budget applies).
    pub price: Option<Price>,
    /// The output bound every request carries: the agent's `max_tokens`, else
    /// [`DEFAULT_MAX_TOKENS`] when a budget applies; `None` sends none.
    pub max_tokens: Option<u32>,
    /// Whether any budget applies (then every request is reserved before it is sent).
    pub budgeted: bool,
}

impl Quote {
    /// Resolve `model` once. Under a budget an unknown model is refused with the message that
    /// names the `pricing:` line to add ([`unpriced_under_budget`]): its cost could not be
    /// bounded.
    pub fn new(
        table: PriceTable,
        model: &str,
        budgeted: bool,
        agent_max_tokens: Option<u32>,
    ) -> Result<Quote, String> {
        let price = match table.resolve(model) {
            Some(r) => Some(r.price),
            None if budgeted => return Err(unpriced_under_budget(model)),
            None => None,
        };
        let max_tokens = if budgeted {
            Some(agent_max_tokens.unwrap_or(DEFAULT_MAX_TOKENS))
        } else {
            agent_max_tokens
        };
        Ok(Quote {
            table,
            requested: model.to_string(),
            price,
            max_tokens,
            budgeted,
        })
    }

    /// What a request whose prompt weighs `prompt_bytes` reserves: `None` when no budget
    /// applies (nothing is reserved).
    pub fn worst_case(&self, prompt_bytes: usize) -> Option<f64> {
        self.ceiling(prompt_bytes).filter(|_| self.budgeted)
    }

    /// The most a request whose prompt weighs `prompt_bytes` may cost, budget or not (what
    /// `dry-run` shows): under a budget exactly what [`Quote::worst_case`] reserves; without
    /// one, with [`DEFAULT_MAX_TOKENS`] standing in for an unset output bound. `None` when the
    /// model has no price.
    pub fn ceiling(&self, prompt_bytes: usize) -> Option<f64> {
        let p = self.price?;
        Some(worst_case_usd(
            p,
            prompt_bytes,
            self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        ))
    }

    /// What a reply is booked at ([`call_cost`]): at the requested model's price, never above
    /// `reserved`.
    pub fn book(
        &self,
        replied: &str,
        usage: Option<TokenUsage>,
        cache: CacheTokens,
        reserved: Option<f64>,
    ) -> RunCost {
        call_cost(
            &self.table,
            Booking {
                requested: &self.requested,
                replied,
                usage,
                cache,
                reserved,
                max_tokens: self.max_tokens.filter(|_| reserved.is_some()),
            },
        )
    }
}

/// The worst case of a tool loop before it runs, as `describe` and `dry-run` show it: one turn
/// whose prompt weighs `first_prompt` tokens, and `turns` turns where each turn adds at most
/// `growth` tokens (its reply at `max_tokens`, its calls' arguments and results at their caps).
/// Returns (first turn, all turns). Each turn is priced as [`worst_case_usd`] prices it.
pub fn loop_worst_case(
    price: Price,
    first_prompt: u64,
    growth: u64,
    max_tokens: u32,
    turns: u32,
) -> (f64, f64) {
    let one = |k: u64| {
        let bytes = first_prompt.saturating_add(growth.saturating_mul(k));
        worst_case_usd(
            price,
            usize::try_from(bytes).unwrap_or(usize::MAX),
            max_tokens,
        )
    };
    let all = sum_usd((0..u64::from(turns.max(1))).map(one));
    (one(0), all)
}

/// Worst-case cost of one call (see the module doc): `prompt_bytes` (instructions + prompt) as
/// input tokens plus [`MESSAGE_OVERHEAD_TOKENS`], `max_tokens` output tokens, at `price`.
/// Never negative nor NaN (a broken override prices at 0).
pub fn worst_case_usd(price: Price, prompt_bytes: usize, max_tokens: u32) -> f64 {
    let input = prompt_bytes as f64 + MESSAGE_OVERHEAD_TOKENS as f64;
    let c = (input * price.input + f64::from(max_tokens) * price.output) / 1_000_000.0;
    if c.is_finite() && c > 0.0 { c } else { 0.0 }
}

/// Money as people read it, the one format of every surface (console, CLI, `stats`, `jobs`,
/// `describe`, notices, skip reasons, alerts): from $1 up to the cent (`$12.40`), below $1 three
/// significant digits (`$0.381`, `$0.00123`, `$0.0000245`), so a $0.0000245 call is never
/// `$0.0000` and a $0.002 budget never `$0.00`. Zeros past the cents are dropped (`$0.20`,
/// `$0.002`, `$0.0025`). Zero is `$0.00`; a negative amount `-$0.50`; an amount below half a
/// micro-dollar `<$0.000001`; NaN or infinity `$?`. An amount prints the same wherever it is
/// shown, whatever is printed beside it.
pub fn usd(x: f64) -> String {
    if !x.is_finite() {
        return "$?".into();
    }
    let a = x.abs();
    if a == 0.0 {
        return "$0.00".into();
    }
    if a < 0.000_000_5 {
        return if x < 0.0 { "-<$0.000001" } else { "<$0.000001" }.into();
    }
    usd_places(x, money_places(a))
}

/// `x` (finite) to `places` decimals in [`usd`]'s form: zeros past the cents dropped.
fn usd_places(x: f64, places: usize) -> String {
    let a = x.abs();
    let mut s = format!("{a:.places$}");
    // Three significant digits may end in zeros (0.2 → "0.200"): drop those past the cents.
    while s.ends_with('0') && s.len() - s.find('.').unwrap_or(s.len()) > 3 {
        s.pop();
    }
    if x < 0.0 {
        format!("-${s}")
    } else {
        format!("${s}")
    }
}

/// A worst case and the limit it does not fit, printed side by side in one message: as
/// [`usd_up`] and [`usd`] print them, or — when those read the same ("may cost up to $0.00207,
/// the limit is $0.00207") — with as many more digits as it takes to tell them apart
/// (`$0.002069` against `$0.0020689`), so the reader sees by how much the limit falls short.
pub fn usd_over(worst: f64, limit: f64) -> (String, String) {
    let (w, l) = (usd_up(worst), usd(limit));
    if w != l || !(worst > limit && limit > 0.0 && worst.is_finite()) {
        return (w, l);
    }
    for places in money_places(worst) + 1..=12 {
        let scale = 10f64.powi(places as i32);
        let (w, l) = (
            // Rounded up past the float noise of the scaling (relative, as the scale grows).
            usd_places((worst * scale * (1.0 - 1e-12)).ceil() / scale, places),
            usd_places(limit, places),
        );
        if w != l {
            return (w, l);
        }
    }
    (w, l)
}

/// Decimals [`usd`] shows for the amount `a` (≥ 0): the cents from $1 up, three significant
/// digits below it.
fn money_places(a: f64) -> usize {
    if a >= 1.0 || a <= 0.0 {
        2
    } else {
        // 0.0042 → 5: its first significant digit is the third decimal, two more follow it.
        let first = (-a.log10()).ceil().max(1.0) as usize;
        (first + 2).clamp(2, 9)
    }
}

/// [`usd`] rounded up, never down: a limit that must cover `x` ("raise it to …").
pub fn usd_up(x: f64) -> String {
    if !x.is_finite() || x <= 0.0 {
        return usd(x);
    }
    let p = money_places(x);
    let scale = 10f64.powi(p as i32);
    usd((x * scale - 1e-9).ceil() / scale)
}

/// The skip reason of a call refused because the limit itself is below its worst case: no
/// amount of waiting lets it through (`scope` is `global` or `job`).
pub fn too_small_reason(scope: &str, limit: f64, period: BudgetPeriod, worst: f64) -> String {
    let (worst, limit) = usd_over(worst, limit);
    format!(
        "{BUDGET_TOO_SMALL}: it may cost up to {worst}, the {scope} limit is {limit}/{}",
        period_word(period)
    )
}

/// The skip reason of a call refused because what is left of a limit does not cover its worst
/// case (the limit could pay for it in a fresh period): `spent` this period and `held` by runs
/// in flight. It starts `budget reached: SCOPE LIMIT/PERIOD` so a reader can tell the limit.
pub fn reached_reason(
    scope: &str,
    limit: f64,
    period: BudgetPeriod,
    spent: f64,
    held: f64,
    worst: f64,
) -> String {
    format!(
        "{BUDGET_REACHED}: {scope} {}/{}, {} left (spent {}, in flight {}); this call may cost \
         up to {}",
        usd(limit),
        period_word(period),
        usd((limit - spent - held).max(0.0)),
        usd(spent),
        usd(held),
        usd_up(worst)
    )
}

/// The two ways to let one call of worst case `worst` through a `limit` it does not fit: the
/// largest `max_tokens` that fits (`None` when no output budget fits, or output is free), and
/// the smallest limit that fits the call as it is.
pub fn one_call_fixes(
    price: Price,
    prompt_bytes: usize,
    limit: f64,
    worst: f64,
) -> (Option<u32>, f64) {
    let input = (prompt_bytes as f64 + MESSAGE_OVERHEAD_TOKENS as f64) * price.input;
    let room = limit * 1_000_000.0 - input;
    let tokens = (price.output > 0.0 && room > 0.0)
        .then(|| (room / price.output).floor())
        .filter(|n| *n >= 1.0 && n.is_finite())
        .map(|n| n.min(f64::from(u32::MAX)) as u32);
    (tokens, worst)
}

/// How a skip reason starts when the limit itself is below one call's worst case: no amount of
/// waiting lets that call through (lower `max_tokens` or raise the limit). Front ends tell it
/// apart from [`BUDGET_REACHED`] by this prefix.
pub const BUDGET_TOO_SMALL: &str = "budget too small for one call";

/// How a skip reason starts when a limit that could pay for the call has been used up.
pub const BUDGET_REACHED: &str = "budget reached";

/// The sum of amounts, `0.0` (not `-0.0`, which `Iterator::sum` gives for no items) when
/// there are none.
pub fn sum_usd(amounts: impl IntoIterator<Item = f64>) -> f64 {
    let mut total = 0.0;
    for a in amounts {
        total += a;
    }
    total
}

/// Whether any budget covers `job_max_cost_usd`'s job (the global one or its own).
pub fn under_budget(settings: &Settings, job_max_cost_usd: Option<f64>) -> bool {
    settings.budget.is_some() || job_max_cost_usd.is_some()
}

/// The failure of a run whose model has no price while a budget applies (its cost
/// could not be counted, so it is never called): names the model and the `pricing:` line to
/// add. The line never prices the model at $0 (pasted as it is, that would make a paid model
/// free and no budget would count it): it carries the built-in price of the closest known
/// model when the name starts with one (`gpt-4o-mini-…` → gpt-4o-mini's), else placeholders
/// that `validate` refuses until real prices replace them.
pub fn unpriced_under_budget(model: &str) -> String {
    let lower = model.trim().to_ascii_lowercase();
    let key = yaml_key(&lower);
    let closest = PriceTable::builtin().closest(&lower);
    let (line, note) = match &closest {
        Some(r) => (
            format!("{{ input: {}, output: {} }}", r.price.input, r.price.output),
            format!(
                " (that is {}'s built-in price, the closest known name: check your \
                 provider's price for this model)",
                r.name
            ),
        ),
        None => (
            "{ input: INPUT_USD_PER_1M, output: OUTPUT_USD_PER_1M }".to_string(),
            " (replace both with your provider's prices; a model you host yourself may be \
             priced 0)"
                .to_string(),
        ),
    };
    format!(
        "model '{model}' has no known price and a budget applies, so it is never called; add \
         its price (USD per 1M tokens) to the jobs file and apply it{note}: \
         pricing:\n  {key}: {line}"
    )
}

/// `name` as a key of a YAML block mapping that reads back as exactly `name`, whatever it holds:
/// plain when it is a name no YAML reader takes for anything else (a letter, then letters,
/// digits, `-`, `_`, `.`, `/`; not a boolean or null word), else double-quoted with every
/// character outside printable ASCII escaped (`\u200B`), so invisible, control and
/// line-breaking characters survive a paste and show what they are.
fn yaml_key(name: &str) -> String {
    use std::fmt::Write as _;
    const WORDS: [&str; 10] = [
        "true", "false", "null", "yes", "no", "on", "off", "y", "n", "~",
    ];
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && !WORDS.contains(&name.to_ascii_lowercase().as_str());
    if plain {
        return name.to_string();
    }
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xFFFF => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\U{:08X}", u32::from(c));
            }
        }
    }
    out.push('"');
    out
}

/// What has been spent in the current budget period, for the pre-call budget check.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SpendNow {
    /// Spent this period over all jobs, USD.
    pub global_usd: f64,
    /// Spent this period by the job, USD.
    pub job_usd: f64,
}

/// The budget period: the global budget's, else `Settings.period`. Per-job limits use it, and
/// the store keeps every job's counters and reservations under its keys.
pub fn budget_period(settings: &Settings) -> BudgetPeriod {
    settings.budget.map(|b| b.period).unwrap_or(settings.period)
}

pub fn period_word(p: BudgetPeriod) -> &'static str {
    match p {
        BudgetPeriod::Day => "day",
        BudgetPeriod::Week => "week",
        BudgetPeriod::Month => "month",
        BudgetPeriod::Total => "total",
    }
}

/// The pre-call budget check, the first step of a run (before any gate or model call):
/// `Some(reason)` = skip the run.
/// `job_max_cost_usd` is the job's `max_cost_usd`; `spend` is this period's spend.
pub fn budget_check(
    settings: &Settings,
    job_max_cost_usd: Option<f64>,
    spend: SpendNow,
) -> Option<String> {
    if let Some(b) = settings.budget {
        let word = period_word(b.period);
        if !spend.global_usd.is_finite() {
            return Some(format!(
                "budget exhausted: global spend this {word} is unreadable ({})",
                spend.global_usd
            ));
        }
        if spend.global_usd >= b.max_cost_usd {
            return Some(format!(
                "{BUDGET_REACHED}: global {}/{word} spent {}",
                usd(b.max_cost_usd),
                usd(spend.global_usd)
            ));
        }
    }
    if let Some(limit) = job_max_cost_usd {
        let word = period_word(budget_period(settings));
        if !spend.job_usd.is_finite() {
            return Some(format!(
                "budget exhausted: job spend this {word} is unreadable ({})",
                spend.job_usd
            ));
        }
        if spend.job_usd >= limit {
            return Some(format!(
                "{BUDGET_REACHED}: job {}/{word} spent {}",
                usd(limit),
                usd(spend.job_usd)
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Budget;

    fn name(table: &PriceTable, model: &str) -> Option<String> {
        table.resolve(model).map(|r| r.name)
    }

    #[test]
    fn resolution_strips_provider_prefix_and_date_suffix() {
        let tb = PriceTable::builtin();
        assert_eq!(name(&tb, "gpt-4o-mini").as_deref(), Some("gpt-4o-mini"));
        assert_eq!(
            name(&tb, "openai/gpt-4o-mini").as_deref(),
            Some("gpt-4o-mini")
        );
        assert_eq!(
            name(&tb, "gpt-4o-mini-2024-07-18").as_deref(),
            Some("gpt-4o-mini")
        );
        assert_eq!(
            name(&tb, "openrouter/openai/GPT-4o-mini-2024-07-18").as_deref(),
            Some("gpt-4o-mini")
        );
        assert_eq!(
            name(&tb, "claude-3-5-haiku-20241022").as_deref(),
            Some("claude-3-5-haiku")
        );
        assert_eq!(
            name(&tb, "claude-sonnet-4-5@20250929").as_deref(),
            Some("claude-sonnet-4-5")
        );
        assert_eq!(
            name(&tb, "claude-3-7-sonnet-latest").as_deref(),
            Some("claude-3-7-sonnet")
        );
        assert_eq!(name(&tb, "gpt-4o-2024-08-06").as_deref(), Some("gpt-4o"));
    }

    #[test]
    fn a_name_that_only_shares_a_prefix_is_unpriced() {
        // Prefix pricing would price o1-pro as o1 (10× too low).
        let tb = PriceTable::builtin();
        let mini = tb.resolve("gpt-4o-mini").unwrap();
        assert_eq!((mini.price.input, mini.price.output), (0.15, 0.60));
        for unknown in [
            "gpt-4.1-mini-fast",
            "o3-mini-high",
            "gpt-4o-audio-2099",
            "gpt-4o-realtime-preview",
            "o1x",
            "gpt-4omni",
            "claude-opus-4-5-thinking",
        ] {
            assert_eq!(name(&tb, unknown), None, "{unknown}");
        }
    }

    #[test]
    fn premium_variants_have_their_own_price() {
        let tb = PriceTable::builtin();
        let p = |m: &str| {
            tb.resolve(m)
                .map(|r| (r.name, r.price.input, r.price.output))
        };
        assert_eq!(p("o1-pro"), Some(("o1-pro".into(), 150.0, 600.0)));
        assert_eq!(
            p("o1-pro-2025-03-19"),
            Some(("o1-pro".into(), 150.0, 600.0))
        );
        assert_eq!(p("o3-pro"), Some(("o3-pro".into(), 20.0, 80.0)));
        assert_eq!(
            p("openai/o3-pro-2025-06-10").map(|x| x.0),
            Some("o3-pro".into())
        );
        assert_eq!(
            p("gpt-4o-audio-preview-2024-12-17").map(|x| x.0),
            Some("gpt-4o-audio-preview".into())
        );
        assert_eq!(
            p("gpt-4o-mini-search-preview").map(|x| x.0),
            Some("gpt-4o-mini-search-preview".into())
        );
        assert_eq!(p("gpt-5-pro").map(|x| x.1), Some(15.0));
    }

    #[test]
    fn known_aliases_and_dated_previews_resolve() {
        let tb = PriceTable::builtin();
        assert_eq!(
            name(&tb, "claude-sonnet-4-0").as_deref(),
            Some("claude-sonnet-4")
        );
        assert_eq!(name(&tb, "chatgpt-4o-latest").as_deref(), Some("gpt-4o"));
        assert_eq!(
            name(&tb, "anthropic/claude-opus-4-0").as_deref(),
            Some("claude-opus-4")
        );
        assert_eq!(
            name(&tb, "gpt-4o-audio-preview-12-17").as_deref(),
            Some("gpt-4o-audio-preview")
        );
        assert_eq!(
            name(&tb, "gpt-5-chat-latest").as_deref(),
            Some("gpt-5-chat")
        );
        // Every alias points at a real entry.
        for (alias, target) in ALIASES {
            assert!(tb.prices.contains_key(*target), "{alias} → {target}");
        }
    }

    #[test]
    fn money_is_cents_from_a_dollar_and_three_significant_digits_below() {
        assert_eq!(usd(1.0), "$1.00");
        assert_eq!(usd(12.4), "$12.40");
        assert_eq!(usd(1234.567), "$1234.57");
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(1e-9), "<$0.000001");
        assert_eq!(usd(-0.5), "-$0.50");
        // Three significant digits below $1, zeros past the cents dropped.
        assert_eq!(usd(0.381), "$0.381");
        assert_eq!(usd(0.3814), "$0.381");
        assert_eq!(usd(0.00123), "$0.00123");
        assert_eq!(usd(0.0000245), "$0.0000245");
        assert_eq!(usd(0.0000246), "$0.0000246");
        assert_eq!(usd(0.002469), "$0.00247");
        assert_eq!(usd(0.2), "$0.20");
        assert_eq!(usd(0.25), "$0.25");
        assert_eq!(usd(0.214), "$0.214");
        assert_eq!(usd(0.002), "$0.002");
        assert_eq!(usd(0.001), "$0.001");
        assert_eq!(usd(0.01), "$0.01");
        assert_eq!(usd(0.1), "$0.10");
        assert_eq!(usd(0.0003), "$0.0003");
        assert_eq!(usd(0.0123), "$0.0123");
        // Rounding carries into the next digit without growing the places.
        assert_eq!(usd(0.09996), "$0.10");
        assert_eq!(usd(0.9996), "$1.00");
        assert_eq!(usd(0.000_000_6), "$0.0000006");
        assert_eq!(usd(f64::NAN), "$?");
        assert_eq!(usd(-0.0025), "-$0.0025");
    }

    /// An empty f64 sum is -0.0: shown as zero, never `$-0.00`.
    #[test]
    fn money_never_shows_a_negative_zero() {
        let empty: Vec<f64> = Vec::new();
        assert!(
            empty.iter().copied().sum::<f64>().is_sign_negative(),
            "why sum_usd exists"
        );
        assert!(sum_usd(empty).is_sign_positive());
        assert_eq!(usd(sum_usd([])), "$0.00");
        assert_eq!(usd(-0.0), "$0.00");
        assert!((sum_usd([0.1, 0.2]) - 0.3).abs() < 1e-12);
    }

    #[test]
    fn worst_case_counts_prompt_bytes_and_max_output() {
        let p = Price::new(2.0, 8.0);
        let c = worst_case_usd(p, 1000 - MESSAGE_OVERHEAD_TOKENS as usize, 500);
        assert!(
            (c - (1000.0 * 2.0 + 500.0 * 8.0) / 1e6).abs() < 1e-15,
            "{c}"
        );
        let bad = Price::new(f64::NAN, -1.0);
        assert_eq!(worst_case_usd(bad, 10, 10), 0.0);
    }

    fn m1_table() -> PriceTable {
        let mut o = BTreeMap::new();
        o.insert("m1".to_string(), Price::new(10.0, 10.0));
        PriceTable::with_overrides(&o)
    }

    fn booked(replied: &str, input: i64, output: i64, reserved: Option<f64>) -> RunCost {
        call_cost(
            &m1_table(),
            Booking {
                requested: "m1",
                replied,
                usage: Some(TokenUsage { input, output }),
                cache: CacheTokens::default(),
                reserved,
                max_tokens: reserved.map(|_| 1000),
            },
        )
    }

    /// A reply claiming 100 000 prompt tokens for a 20-byte prompt must not be booked at $1.01
    /// against a $0.02 budget. Booked cost never exceeds the reservation.
    #[test]
    fn usage_above_the_reservation_is_booked_at_the_reservation() {
        let p = Price::new(10.0, 10.0);
        let w = worst_case_usd(p, 20, 1000);
        let c = booked("m1", 100_000, 10, Some(w));
        assert_eq!(c.cost_usd, w, "{c:?}");
        assert!(!c.unpriced);
        let r = c.reason.unwrap_or_default();
        assert!(
            r.starts_with("usage above the worst case (100000 input, 10 output tokens): booked at the reservation $0.0108 instead of $1.00"),
            "{r}"
        );
        // Output over the request's bound says so, and is booked at the reservation too.
        let c = booked("m1", 10, 5000, Some(w));
        assert_eq!(c.cost_usd, w);
        assert!(
            c.reason
                .unwrap_or_default()
                .contains("more than the request allowed (1000)")
        );
        // Honest usage at the very bound is its own figure, with no note.
        let c = booked("m1", 84, 1000, Some(w));
        assert!((c.cost_usd - w).abs() < 1e-15 && c.cost_usd <= w, "{c:?}");
        assert_eq!(c.reason, None);
        let c = booked("m1", 10, 10, Some(w));
        assert!((c.cost_usd - 0.0002).abs() < 1e-15);
        assert_eq!(c.reason, None);
        // Without a reservation (no budget) nothing caps the figure.
        let c = booked("m1", 100_000, 10, None);
        assert!((c.cost_usd - 1.0001).abs() < 1e-12);
    }

    /// A reply naming `o1-pro` for a request of `m1` must not be priced at o1-pro ($0.615
    /// against a $0.02 budget). The requested model is priced (what was reserved).
    #[test]
    fn a_reply_naming_another_model_is_priced_at_the_requested_one() {
        let w = worst_case_usd(Price::new(10.0, 10.0), 20, 1000);
        let c = booked("o1-pro", 50, 1000, Some(w));
        assert!((c.cost_usd - 0.0105).abs() < 1e-12, "{c:?}");
        assert_eq!(c.priced_as.as_deref(), Some("m1"));
        assert_eq!(
            c.reason.as_deref(),
            Some("reply names model 'o1-pro'; priced as the requested 'm1'")
        );
        // Even unbudgeted, the requested model's price wins when it has one.
        let c = booked("o1-pro", 100, 1000, None);
        assert!((c.cost_usd - 0.011).abs() < 1e-12, "{c:?}");
        // A dated snapshot of the same model and an unknown reply name: no note, same price.
        assert_eq!(booked("m1-2026-01-01", 10, 10, Some(w)).reason, None);
        assert_eq!(booked("mystery", 10, 10, Some(w)).reason, None);
        assert!(!booked("mystery", 10, 10, Some(w)).unpriced);
        // An unpriced request (a router name, no budget) is priced at the reply's model.
        let c = call_cost(
            &m1_table(),
            Booking {
                requested: "openrouter/auto",
                replied: "gpt-4o-mini",
                usage: Some(TokenUsage {
                    input: 1_000_000,
                    output: 0,
                }),
                cache: CacheTokens::default(),
                reserved: None,
                max_tokens: None,
            },
        );
        assert_eq!(c.priced_as.as_deref(), Some("gpt-4o-mini"));
        assert!((c.cost_usd - 0.15).abs() < 1e-12);
    }

    #[test]
    fn unpriced_message_names_the_model_and_the_line() {
        let m = unpriced_under_budget("Local-Llama");
        assert!(m.contains("model 'Local-Llama'"), "{m}");
        assert!(
            m.contains(
                "pricing:\n  local-llama: { input: INPUT_USD_PER_1M, output: OUTPUT_USD_PER_1M }"
            ),
            "{m}"
        );
        let m = unpriced_under_budget("llama3.1:8b");
        assert!(m.contains("\"llama3.1:8b\": { input"), "{m}");
    }

    /// The suggested line never prices a model at $0: a name that starts with a known model
    /// gets that model's price (said so), any other gets placeholders that do not validate.
    #[test]
    fn the_unpriced_hint_never_suggests_a_zero_price() {
        let m = unpriced_under_budget("gpt-4o-mini-2024-07-18-turbo");
        assert!(
            m.contains("pricing:\n  gpt-4o-mini-2024-07-18-turbo: { input: 0.15, output: 0.6 }"),
            "{m}"
        );
        assert!(m.contains("gpt-4o-mini's built-in price"), "{m}");
        let m = unpriced_under_budget("openai/gpt-4o-mini-turbo");
        assert!(m.contains("{ input: 0.15, output: 0.6 }"), "{m}");
        // Only at a name boundary: `gpt-4ox` is not `gpt-4o`.
        assert!(PriceTable::builtin().closest("gpt-4ox").is_none());
        for name in ["gpt-4o-mini-2024-07-18-turbo", "mystery-9b", "Local-Llama"] {
            let m = unpriced_under_budget(name);
            assert!(
                !m.contains("input: 0,") && !m.contains("input: 0.00"),
                "{m}"
            );
        }
    }

    /// Whatever a model's name holds (invisible, control, quote, YAML indicator characters,
    /// words YAML reads as booleans or null, numbers), the hint's `pricing:` snippet, as
    /// printed and pasted into a jobs file, parses, and its key is the model's name.
    #[test]
    fn the_unpriced_hint_parses_as_yaml_for_hostile_names() {
        let names = [
            "gpt\u{200b}-4o",
            "\u{feff}bom",
            "rtl\u{202e}evil",
            "tab\there",
            "new\nline: { input: 0, output: 0 }",
            "esc\u{1b}[31m",
            "quote\"back\\slash",
            "a: b",
            "#comment",
            "- dash",
            "[flow]",
            "{flow}",
            "&anchor",
            "*alias",
            "!tag",
            "%dir",
            "@at",
            "`tick",
            "? key",
            "| block",
            "> fold",
            "'single'",
            "true",
            "Null",
            "no",
            "1.5",
            "0x1f",
            ".inf",
            "~",
            "emoji-\u{1f600}",
            "ünïcödé",
            "mystery-9b",
        ];
        for name in names {
            // As printed: every output shows an invisible or control character as an escape
            // (`\u{200b}`), which must not land inside the key's quotes.
            let hint = unpriced_under_budget(name);
            let hint = crate::text::visible(&hint);
            let (_, snippet) = hint.split_once("pricing:\n").expect("a snippet");
            let snippet = snippet
                .replace("INPUT_USD_PER_1M", "1.5")
                .replace("OUTPUT_USD_PER_1M", "2.5");
            let text = format!("pricing:\n{snippet}\njobs: []\n");
            let loaded = crate::config::load_str(&text, std::path::Path::new("jobs.yaml"))
                .unwrap_or_else(|e| panic!("{name:?}: {e}\n{text}"));
            let keys: Vec<&String> = loaded.file.settings.pricing.keys().collect();
            let want = name.trim().to_ascii_lowercase();
            assert_eq!(keys, [&want], "{name:?}: {text}");
        }
    }

    #[test]
    fn overrides_extend_and_win() {
        let mut o = BTreeMap::new();
        o.insert("gpt-4o-mini".to_string(), Price::new(1.0, 2.0));
        o.insert("My-Model".to_string(), Price::new(0.2, 0.6));
        let tb = PriceTable::with_overrides(&o);
        assert_eq!(tb.resolve("gpt-4o-mini").unwrap().price.input, 1.0);
        assert_eq!(
            tb.resolve("openai/gpt-4o-mini-2024-07-18")
                .unwrap()
                .price
                .output,
            2.0
        );
        assert_eq!(tb.resolve("my-model").unwrap().price.input, 0.2);
        assert_eq!(tb.resolve("gpt-4o").unwrap().price.input, 2.5);
    }

    #[test]
    fn cost_is_exact_per_million() {
        let tb = PriceTable::builtin();
        let c = run_cost(
            &tb,
            "gpt-4o-mini",
            Some(TokenUsage {
                input: 1_000_000,
                output: 500_000,
            }),
        );
        assert!((c.cost_usd - (0.15 + 0.30)).abs() < 1e-12, "{c:?}");
        assert!(!c.unpriced);
        assert_eq!(c.reason, None);
        assert_eq!((c.input_tokens, c.output_tokens), (1_000_000, 500_000));
    }

    #[test]
    fn unknown_model_and_missing_usage_are_unpriced_at_zero() {
        let tb = PriceTable::builtin();
        let c = run_cost(
            &tb,
            "mystery-7b",
            Some(TokenUsage {
                input: 10,
                output: 5,
            }),
        );
        assert_eq!(c.cost_usd, 0.0);
        assert!(c.unpriced);
        assert_eq!(c.reason.as_deref(), Some("unpriced model"));
        assert_eq!((c.input_tokens, c.output_tokens), (10, 5));

        let c = run_cost(&tb, "gpt-4o", None);
        assert_eq!(c.cost_usd, 0.0);
        assert!(c.unpriced);
        assert_eq!(c.reason.as_deref(), Some("no usage in reply"));
        assert_eq!(name(&tb, ""), None);
    }

    #[test]
    fn negative_and_absurd_counts_clamp_to_zero() {
        assert_eq!(clamp_tokens(-5), (0, true));
        assert_eq!(clamp_tokens(MAX_PLAUSIBLE_TOKENS + 1), (0, true));
        assert_eq!(clamp_tokens(MAX_PLAUSIBLE_TOKENS), (100_000_000, false));
        assert_eq!(clamp_tokens(0), (0, false));
        let tb = PriceTable::builtin();
        let c = run_cost(
            &tb,
            "gpt-4o",
            Some(TokenUsage {
                input: -1_000,
                output: i64::MAX,
            }),
        );
        assert_eq!((c.input_tokens, c.output_tokens), (0, 0));
        assert_eq!(c.cost_usd, 0.0);
        assert!(c.unpriced);
        // One bad count does not zero the other.
        let c = run_cost(
            &tb,
            "gpt-4o",
            Some(TokenUsage {
                input: 1_000_000,
                output: -3,
            }),
        );
        assert!((c.cost_usd - 2.5).abs() < 1e-12);
        assert!(c.unpriced);
    }

    fn settings(budget: Option<Budget>) -> Settings {
        Settings {
            budget,
            ..Settings::default()
        }
    }

    fn day(max: f64) -> Option<Budget> {
        Some(Budget {
            max_cost_usd: max,
            period: BudgetPeriod::Day,
        })
    }

    /// A worst case just over its limit is printed with the digits that tell the two apart,
    /// never as the same figure twice; amounts that read apart keep their usual form.
    #[test]
    fn a_worst_case_just_over_its_limit_reads_apart_from_it() {
        assert_eq!(
            usd_over(0.002_069, 0.002_068_9),
            ("$0.002069".to_string(), "$0.0020689".to_string())
        );
        assert_eq!(
            too_small_reason("job", 0.002_068_9, BudgetPeriod::Day, 0.002_069),
            "budget too small for one call: it may cost up to $0.002069, the job limit is \
             $0.0020689/day"
        );
        assert_eq!(
            usd_over(0.002_512_2, 0.002),
            ("$0.00252".to_string(), "$0.002".to_string())
        );
        // Apart only far down: still apart, still rounded up for the worst case.
        let (w, l) = usd_over(0.100_000_01, 0.1);
        assert_ne!(w, l);
        assert_eq!(l, "$0.10");
    }

    /// A limit below one call's worst case is "too small for one call", with both fixes; a
    /// limit that could pay for the call but is used up is "reached", with what is left.
    #[test]
    fn too_small_and_reached_say_which_and_what_would_fit() {
        let mini = Price::new(0.15, 0.60);
        let worst = worst_case_usd(mini, 300, 4096);
        assert!((worst - 0.002_512_2).abs() < 1e-9, "{worst}");
        assert_eq!(
            too_small_reason("job", 0.002, BudgetPeriod::Day, worst),
            "budget too small for one call: it may cost up to $0.00252, the job limit is \
             $0.002/day"
        );
        assert_eq!(
            reached_reason("global", 0.25, BudgetPeriod::Day, 0.2487, 0.001, worst),
            "budget reached: global $0.25/day, $0.0003 left (spent $0.249, in flight $0.001); \
             this call may cost up to $0.00252"
        );
        let (tokens, raise) = one_call_fixes(mini, 300, 0.002, worst);
        // 364 input tokens at $0.15/M leave room for 3242 output tokens at $0.60/M.
        assert_eq!(tokens, Some(3242));
        assert!(worst_case_usd(mini, 300, 3242) <= 0.002);
        assert!(worst_case_usd(mini, 300, 3243) > 0.002);
        assert_eq!(usd_up(raise), "$0.00252");
        assert_eq!(usd_up(0.0024001), "$0.00241");
        assert_eq!(usd_up(0.25), "$0.25");
        // A limit the prompt alone exceeds: no max_tokens fits.
        assert_eq!(one_call_fixes(mini, 300, 0.00001, worst).0, None);
    }

    #[test]
    fn budget_at_the_limit_skips_just_under_goes() {
        let s = settings(day(1.0));
        let at = SpendNow {
            global_usd: 1.0,
            job_usd: 0.0,
        };
        assert_eq!(
            budget_check(&s, None, at).as_deref(),
            Some("budget reached: global $1.00/day spent $1.00")
        );
        let under = SpendNow {
            global_usd: 0.9999,
            job_usd: 0.0,
        };
        assert_eq!(budget_check(&s, None, under), None);
    }

    #[test]
    fn per_job_limit_uses_the_budget_period() {
        let s = settings(Some(Budget {
            max_cost_usd: 5.0,
            period: BudgetPeriod::Week,
        }));
        let spend = SpendNow {
            global_usd: 0.5,
            job_usd: 0.2,
        };
        assert_eq!(
            budget_check(&s, Some(0.2), spend).as_deref(),
            Some("budget reached: job $0.20/week spent $0.20")
        );
        assert_eq!(budget_check(&s, Some(0.21), spend), None);
        // A zero limit forbids every call.
        assert!(budget_check(&s, Some(0.0), SpendNow::default()).is_some());
    }

    #[test]
    fn no_budget_is_unlimited_but_job_limits_still_apply() {
        let s = settings(None);
        let big = SpendNow {
            global_usd: 1e9,
            job_usd: 1e9,
        };
        assert_eq!(budget_check(&s, None, big), None);
        let r = budget_check(&s, Some(1.0), big).unwrap();
        assert!(r.starts_with("budget reached: job $1.00/day"), "{r}");
    }

    #[test]
    fn unreadable_spend_is_treated_as_exhausted() {
        let s = settings(day(1.0));
        let nan = SpendNow {
            global_usd: f64::NAN,
            job_usd: 0.0,
        };
        assert!(budget_check(&s, None, nan).is_some());
    }

    #[test]
    fn job_period_falls_back_to_settings_period() {
        let mut s = settings(None);
        s.period = BudgetPeriod::Month;
        assert_eq!(budget_period(&s), BudgetPeriod::Month);
        s.budget = day(1.0);
        assert_eq!(budget_period(&s), BudgetPeriod::Day);
    }

    proptest::proptest! {
        #[test]
        fn resolution_never_panics_nor_prices_by_prefix(model in "\\PC{0,40}", suffix in "[a-z]{1,12}") {
            let tb = PriceTable::builtin();
            let _ = tb.resolve(&model);
            // A variant the table does not name is unpriced, never its base model's price.
            let name = format!("gpt-4o-mini-x{suffix}");
            proptest::prop_assert!(tb.resolve(&name).is_none());
            let name = format!("o1-x{suffix}");
            proptest::prop_assert!(tb.resolve(&name).is_none());
        }

        #[test]
        fn costs_are_finite_and_non_negative(i in proptest::num::i64::ANY, o in proptest::num::i64::ANY) {
            let c = run_cost(&PriceTable::builtin(), "gpt-4o", Some(TokenUsage { input: i, output: o }));
            proptest::prop_assert!(c.cost_usd.is_finite() && c.cost_usd >= 0.0);
            proptest::prop_assert!(c.input_tokens <= MAX_PLAUSIBLE_TOKENS as u64);
        }
    }

    /// Money 2: under a budget, a reply without usage (or with a count clamped to 0) was booked
    /// at $0 on its row while its reservation stayed spent at the worst case until the period
    /// ended. The row books the reservation, the figure the budget counts.
    #[test]
    fn a_reserved_reply_of_unknown_cost_is_booked_at_its_reservation() {
        let no_usage = call_cost(
            &m1_table(),
            Booking {
                requested: "m1",
                replied: "m1",
                usage: None,
                cache: CacheTokens::default(),
                reserved: Some(0.25),
                max_tokens: Some(1000),
            },
        );
        assert_eq!(no_usage.cost_usd, 0.25);
        assert!(!no_usage.unpriced);
        assert_eq!(
            no_usage.reason.as_deref(),
            Some("no usage in reply: booked at the reservation $0.25")
        );
        let clamped = booked("m1", -5, 10, Some(0.25));
        assert_eq!(clamped.cost_usd, 0.25);
        assert!(
            clamped
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("implausible token count clamped to 0: booked")),
            "{clamped:?}"
        );
        // Without a budget there is no reservation: $0, marked unpriced, as before.
        let free = booked("m1", -5, 10, None);
        assert!(free.unpriced && free.cost_usd < 0.25, "{free:?}");
    }
}
