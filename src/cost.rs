//! Cost and budgets (SPEC §11): the built-in price table, model-name resolution, turning a
//! reply's token usage into dollars, and the pre-call budget check.
//!
//! Owns: prices (USD per 1M tokens), [`PriceTable::resolve`], [`run_cost`], [`budget_check`],
//! [`spend_in_period`]. Must not touch: the store (the caller passes [`SpendNow`] in and records
//! the cost), the network, clocks (`now` is an argument).
//!
//! Decisions where the SPEC is silent:
//! - Name resolution is case-insensitive and tries, in order: exact → provider prefix stripped
//!   (everything up to the last `/`) → date suffix stripped (`-YYYY-MM-DD`, `-YYYYMMDD`,
//!   `@YYYYMMDD`, `-latest`) → the longest known name that is a prefix ending on a boundary
//!   (`-`, `.`, `:`, `@`, `_`). Longest-prefix means `gpt-4o-mini-audio` prices as
//!   `gpt-4o-mini`, never as `gpt-4o` (PraisonAI's 16× overcharge).
//! - "Absurd" token counts: negative, or more than [`MAX_PLAUSIBLE_TOKENS`] (100 M) in one call.
//!   They are clamped to 0 and the run is marked unpriced (its real spend is unknown).
//! - A reply without usage, an unknown model, and a clamped count all give cost 0 and
//!   `unpriced: true`, with a reason naming which.
//! - Budget limits are inclusive: spend at or over the limit skips; a limit of 0 forbids every
//!   call. The per-job limit uses the global budget's period, or `Settings.period` when the
//!   global budget is disabled.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::model::{BudgetPeriod, Price, Settings};
use crate::store::SpendNow;

/// When the built-in table was compiled.
pub const PRICES_COMPILED: &str = "2026-11-29";

/// More tokens than this in one call is treated as a corrupt count (clamped to 0).
pub const MAX_PLAUSIBLE_TOKENS: i64 = 100_000_000;

/// Built-in prices, USD per 1M tokens (input, output), compiled on [`PRICES_COMPILED`].
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
    ("gpt-4.1", 2.00, 8.00),
    ("gpt-4.1-mini", 0.40, 1.60),
    ("gpt-4.1-nano", 0.10, 0.40),
    ("gpt-4o", 2.50, 10.00),
    ("gpt-4o-mini", 0.15, 0.60),
    ("gpt-4-turbo", 10.00, 30.00),
    ("gpt-4", 30.00, 60.00),
    ("gpt-3.5-turbo", 0.50, 1.50),
    ("o1", 15.00, 60.00),
    ("o1-mini", 1.10, 4.40),
    ("o3", 2.00, 8.00),
    ("o3-mini", 1.10, 4.40),
    ("o4-mini", 1.10, 4.40),
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

/// Token counts as a provider reported them (raw: may be negative or absurd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenUsage {
    pub input: i64,
    pub output: i64,
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
                    (
                        n.to_string(),
                        Price {
                            input: *i,
                            output: *o,
                        },
                    )
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

    pub fn len(&self) -> usize {
        self.prices.len()
    }

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
        self.longest_prefix(undated)
    }

    fn longest_prefix(&self, name: &str) -> Option<Resolved> {
        // Only keys <= name can be prefixes of it; scanning the whole (small) table keeps this
        // obviously correct. ~50 entries: well under a microsecond (see benches/cost.rs).
        self.prices
            .iter()
            .filter(|(k, _)| {
                name.len() > k.len()
                    && name.starts_with(k.as_str())
                    && matches!(name.as_bytes()[k.len()], b'-' | b'.' | b':' | b'@' | b'_')
            })
            .max_by_key(|(k, _)| k.len())
            .map(|(k, p)| Resolved {
                name: k.clone(),
                price: *p,
            })
    }
}

/// `gpt-4o-mini-2024-07-18` → `gpt-4o-mini`; `claude-3-5-haiku-20241022` → `claude-3-5-haiku`;
/// `…@20241022` and `…-latest` likewise. Anything else is returned unchanged.
fn strip_date_suffix(name: &str) -> &str {
    if let Some(rest) = name.strip_suffix("-latest") {
        return rest;
    }
    let b = name.as_bytes();
    let all_digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
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
#[derive(Debug, Clone, PartialEq)]
pub struct RunCost {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// The spend is incomplete (unknown model, no usage, or a clamped count).
    pub unpriced: bool,
    /// Why it is unpriced ("unpriced model", "no usage in reply", …).
    pub reason: Option<String>,
    /// The table entry used, if any.
    pub priced_as: Option<String>,
}

/// Cost of one reply from `model` with `usage` (`None` = the provider sent no usage).
pub fn run_cost(table: &PriceTable, model: &str, usage: Option<TokenUsage>) -> RunCost {
    let Some(usage) = usage else {
        return RunCost {
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            unpriced: true,
            reason: Some("no usage in reply".to_string()),
            priced_as: None,
        };
    };
    let (input, bad_in) = clamp_tokens(usage.input);
    let (output, bad_out) = clamp_tokens(usage.output);
    let Some(resolved) = table.resolve(model) else {
        return RunCost {
            input_tokens: input,
            output_tokens: output,
            cost_usd: 0.0,
            unpriced: true,
            reason: Some("unpriced model".to_string()),
            priced_as: None,
        };
    };
    let cost =
        (input as f64 * resolved.price.input + output as f64 * resolved.price.output) / 1_000_000.0;
    // A negative or non-finite override must not produce negative or NaN spend.
    let cost = if cost.is_finite() && cost > 0.0 {
        cost
    } else {
        0.0
    };
    let clamped = bad_in || bad_out;
    RunCost {
        input_tokens: input,
        output_tokens: output,
        cost_usd: cost,
        unpriced: clamped,
        reason: clamped.then(|| "implausible token count clamped to 0".to_string()),
        priced_as: Some(resolved.name),
    }
}

/// The period per-job limits use: the global budget's, else `Settings.period`.
pub fn job_period(settings: &Settings) -> BudgetPeriod {
    settings.budget.map(|b| b.period).unwrap_or(settings.period)
}

/// Spend that counts toward the period containing `now`: a total recorded under another period
/// key (`BudgetPeriod::key`) belongs to an older period and counts as 0.
pub fn spend_in_period(
    recorded_key: &str,
    recorded_usd: f64,
    period: BudgetPeriod,
    now: DateTime<Utc>,
) -> f64 {
    if recorded_key == period.key(now) {
        recorded_usd
    } else {
        0.0
    }
}

fn period_word(p: BudgetPeriod) -> &'static str {
    match p {
        BudgetPeriod::Day => "day",
        BudgetPeriod::Week => "week",
        BudgetPeriod::Month => "month",
        BudgetPeriod::Total => "total",
    }
}

/// The pre-call budget check (SPEC §8 step 1, §11): `Some(reason)` = skip the run.
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
                "budget exhausted: global ${:.2}/{word} spent ${:.4}",
                b.max_cost_usd, spend.global_usd
            ));
        }
    }
    if let Some(limit) = job_max_cost_usd {
        let word = period_word(job_period(settings));
        if !spend.job_usd.is_finite() {
            return Some(format!(
                "budget exhausted: job spend this {word} is unreadable ({})",
                spend.job_usd
            ));
        }
        if spend.job_usd >= limit {
            return Some(format!(
                "budget exhausted: job ${limit:.2}/{word} spent ${:.4}",
                spend.job_usd
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Budget;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

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
    fn a_longer_name_never_takes_a_shorter_models_price() {
        let tb = PriceTable::builtin();
        let mini = tb.resolve("gpt-4o-mini").unwrap();
        assert_eq!(mini.price.input, 0.15);
        assert_eq!(mini.price.output, 0.60);
        // Unknown variants of gpt-4o-mini resolve by the *longest* known prefix.
        assert_eq!(
            name(&tb, "gpt-4o-mini-search-preview").as_deref(),
            Some("gpt-4o-mini")
        );
        assert_eq!(
            name(&tb, "gpt-4.1-mini-fast").as_deref(),
            Some("gpt-4.1-mini")
        );
        assert_eq!(name(&tb, "o3-mini-high").as_deref(), Some("o3-mini"));
        // A prefix must end on a boundary: `o1` is not a price for `o1x`.
        assert_eq!(name(&tb, "o1x"), None);
        assert_eq!(name(&tb, "gpt-4omni"), None);
    }

    #[test]
    fn overrides_extend_and_win() {
        let mut o = BTreeMap::new();
        o.insert(
            "gpt-4o-mini".to_string(),
            Price {
                input: 1.0,
                output: 2.0,
            },
        );
        o.insert(
            "My-Model".to_string(),
            Price {
                input: 0.2,
                output: 0.6,
            },
        );
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

    #[test]
    fn budget_at_the_limit_skips_just_under_goes() {
        let s = settings(day(1.0));
        let at = SpendNow {
            global_usd: 1.0,
            job_usd: 0.0,
        };
        assert_eq!(
            budget_check(&s, None, at).as_deref(),
            Some("budget exhausted: global $1.00/day spent $1.0000")
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
            Some("budget exhausted: job $0.20/week spent $0.2000")
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
        assert!(r.starts_with("budget exhausted: job $1.00/day"), "{r}");
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
    fn period_spend_rolls_at_utc_boundaries() {
        let key = BudgetPeriod::Day.key(t("2026-11-29T23:59:59Z"));
        assert_eq!(
            spend_in_period(&key, 0.7, BudgetPeriod::Day, t("2026-11-29T23:59:59Z")),
            0.7
        );
        assert_eq!(
            spend_in_period(&key, 0.7, BudgetPeriod::Day, t("2026-11-30T00:00:00Z")),
            0.0
        );
        // 23:30 at UTC-02:00 is already the next UTC day.
        assert_eq!(
            spend_in_period(&key, 0.7, BudgetPeriod::Day, t("2026-11-29T23:30:00-02:00")),
            0.0
        );
        let wk = BudgetPeriod::Week.key(t("2026-11-29T12:00:00Z")); // a Sunday
        assert_eq!(
            spend_in_period(&wk, 2.0, BudgetPeriod::Week, t("2026-11-30T00:00:00Z")),
            0.0
        );
        let mo = BudgetPeriod::Month.key(t("2026-11-30T23:59:59Z"));
        assert_eq!(
            spend_in_period(&mo, 2.0, BudgetPeriod::Month, t("2026-12-01T00:00:00Z")),
            0.0
        );
        assert_eq!(
            spend_in_period("total", 9.0, BudgetPeriod::Total, t("2030-01-01T00:00:00Z")),
            9.0
        );
    }

    #[test]
    fn job_period_falls_back_to_settings_period() {
        let mut s = settings(None);
        s.period = BudgetPeriod::Month;
        assert_eq!(job_period(&s), BudgetPeriod::Month);
        s.budget = day(1.0);
        assert_eq!(job_period(&s), BudgetPeriod::Day);
    }

    proptest::proptest! {
        #[test]
        fn resolution_never_panics_and_prefers_longer_names(model in "\\PC{0,40}", suffix in "[a-z0-9-]{0,12}") {
            let tb = PriceTable::builtin();
            let _ = tb.resolve(&model);
            // Any gpt-4o-mini variant prices as gpt-4o-mini, never as gpt-4o.
            let name = format!("gpt-4o-mini-{suffix}");
            let r = tb.resolve(&name).unwrap();
            proptest::prop_assert_eq!(r.name, "gpt-4o-mini");
        }

        #[test]
        fn costs_are_finite_and_non_negative(i in proptest::num::i64::ANY, o in proptest::num::i64::ANY) {
            let c = run_cost(&PriceTable::builtin(), "gpt-4o", Some(TokenUsage { input: i, output: o }));
            proptest::prop_assert!(c.cost_usd.is_finite() && c.cost_usd >= 0.0);
            proptest::prop_assert!(c.input_tokens <= MAX_PLAUSIBLE_TOKENS as u64);
        }
    }
}
