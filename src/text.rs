//! The one inert-text policy: every piece of outside text that
//! cronsole shows or prints — command output, web pages, model replies, diffs, job names — passes
//! through here, so a stray `ESC ] 52 ;`, `ESC [ 2 J`, a U+202E right-to-left override or a
//! zero-width joiner cannot rewrite the operator's clipboard or screen or make text read
//! differently from what it is. Also owns [`Secrets`]: removing configured API-key values from
//! every text cronsole writes; and how a URL is shown ([`url_display`]: path and query elided)
//! and which of its parts may be tokens ([`url_tokens`]).
//!
//! Owns: [`is_unsafe`] (the policy: which characters never reach an output as themselves) and its
//! renderings — [`line()`]/[`lines`] for the console (unsafe characters and whole escape sequences
//! removed) and [`visible`]/[`visible_tabs`]/[`visible_line`] for printed text (headless lines,
//! `history`, `diff`, `probe`, chat alerts: unsafe characters shown as `^[` / `\u{202e}` so the
//! reader sees that something was there), and [`InertJson`]/[`to_json`] for `--json` output (unsafe
//! characters as `\uXXXX` escapes). Must not touch: layout, colour, the terminal, I/O (the JSON
//! serializers write to the writer they are given).
//!
//! Unsafe: C0 controls and DEL (except that `\n` and `\t` are handled by each rendering), C1
//! controls, bidirectional embeddings/overrides/isolates/marks (U+202A–U+202E, U+2066–U+2069,
//! U+200E, U+200F, U+061C), zero-width and invisible formatting characters (U+200B–U+200D,
//! U+2060–U+2064, U+FEFF, U+180E, U+00AD soft hyphen) and the Unicode line/paragraph separators
//! (U+2028, U+2029, treated as line breaks where a rendering keeps lines).

use std::borrow::Cow;

const TAB_WIDTH: usize = 4;

fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200D}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{180E}' | '\u{00AD}')
}

/// The policy: `c` never reaches an output as itself (`\n` and `\t` included: each rendering
/// decides what a line break and a tab become).
pub fn is_unsafe(c: char) -> bool {
    (c as u32) < 0x20
        || ('\u{7F}'..='\u{9F}').contains(&c)
        || is_bidi(c)
        || is_invisible(c)
        || matches!(c, '\u{2028}' | '\u{2029}')
}

/// One line of inert text for the console: escape sequences removed whole, unsafe characters
/// removed, tabs expanded, line breaks turned into single spaces. Borrowed when nothing had to
/// change (the common case).
pub fn line(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(clean(s, true))
}

/// Multi-line text as inert console lines (each as by [`line()`], split on `\n`; `\r\n`, a lone
/// `\r`, U+2028 and U+2029 also end a line).
pub fn lines(s: &str) -> Vec<String> {
    let cleaned = clean(s, false);
    cleaned.split('\n').map(str::to_string).collect()
}

/// Printed text, lines kept: `\n` and `\t` stay, every other unsafe character is shown — C0 in
/// caret notation (`^[`, `^G`), DEL as `^?`, the rest as `\u{202e}` — so nothing acts on the
/// terminal and nothing hides. Borrowed when nothing had to change.
pub fn visible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c) && c != '\n' && c != '\t') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            c => push_visible(&mut out, c),
        }
    }
    Cow::Owned(out)
}

/// One printed line that keeps its tabs (diff and probe lines, already split by the caller): as
/// [`visible`], with a stray line break shown as `^J`.
pub fn visible_tabs(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c) && c != '\t') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\t' => out.push(c),
            c => push_visible(&mut out, c),
        }
    }
    Cow::Owned(out)
}

/// Printed text on one line (headless lines, log fields): as [`visible`], with a line break shown
/// as `\n` and a tab as a space.
pub fn visible_line(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push(' '),
            c => push_visible(&mut out, c),
        }
    }
    Cow::Owned(out)
}

fn push_visible(out: &mut String, c: char) {
    if !is_unsafe(c) {
        out.push(c);
    } else if (c as u32) < 0x20 {
        out.push('^');
        out.push(char::from(b'@' + c as u8));
    } else if c == '\u{7F}' {
        out.push_str("^?");
    } else {
        out.push_str(&format!("\\u{{{:x}}}", c as u32));
    }
}

/// The console implementation; `one_line` maps line breaks to a space instead of keeping `\n`.
fn clean(s: &str, one_line: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut col = 0usize;
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\u{1B}' => skip_escape(&mut it),
            // 8-bit CSI / OSC / DCS introducers: drop the whole sequence as for the 7-bit forms.
            '\u{9B}' => skip_csi(&mut it),
            '\u{9D}' | '\u{90}' | '\u{98}' | '\u{9E}' | '\u{9F}' => skip_string(&mut it),
            '\t' => {
                let n = TAB_WIDTH - (col % TAB_WIDTH);
                out.extend(std::iter::repeat_n(' ', n));
                col += n;
            }
            '\r' | '\n' | '\u{2028}' | '\u{2029}' => {
                if c == '\r' && it.peek() == Some(&'\n') {
                    it.next();
                }
                if one_line {
                    if !out.ends_with(' ') {
                        out.push(' ');
                        col += 1;
                    }
                } else {
                    out.push('\n');
                    col = 0;
                }
            }
            c if is_unsafe(c) => {}
            c => {
                out.push(c);
                col += 1;
            }
        }
    }
    out
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// After an ESC: drop the sequence it starts.
fn skip_escape(it: &mut Chars<'_>) {
    match it.next() {
        Some('[') => skip_csi(it),
        Some(']' | 'P' | 'X' | '^' | '_') => skip_string(it),
        // Two-byte escapes (ESC 7, ESC c, ESC ( B's intermediate form…): the intermediate bytes
        // 0x20..=0x2F then one final byte.
        Some(c) if (' '..='/').contains(&c) => {
            while let Some(&n) = it.peek() {
                it.next();
                if !(' '..='/').contains(&n) {
                    break;
                }
            }
        }
        _ => {}
    }
}

/// CSI: parameter and intermediate bytes up to a final byte in 0x40..=0x7E.
fn skip_csi(it: &mut Chars<'_>) {
    for c in it.by_ref() {
        if ('\u{40}'..='\u{7E}').contains(&c) {
            break;
        }
        // A control character or non-ASCII inside a CSI ends it (malformed); drop it too.
        if !(' '..='?').contains(&c) {
            break;
        }
    }
}

/// OSC/DCS/SOS/PM/APC: a string up to BEL, ST (`ESC \`) or the 8-bit ST (0x9C).
fn skip_string(it: &mut Chars<'_>) {
    while let Some(c) = it.next() {
        match c {
            '\u{07}' | '\u{9C}' => break,
            '\u{1B}' => {
                if it.peek() == Some(&'\\') {
                    it.next();
                }
                break;
            }
            _ => {}
        }
    }
}

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";
/// Secret values shorter than this are not redacted by value (too likely to match ordinary
/// text); `validate` warns about them.
pub const MIN_SECRET_CHARS: usize = 8;
/// A cut-off tail of a secret at least this long, at the end of a text or just before a
/// truncation mark, is redacted too.
const MIN_PARTIAL_CHARS: usize = 4;

/// A URL as cronsole prints and records it (errors, rows, logs, `probe`): the scheme, host and
/// port, with the path and the query elided (`https://hooks.example.com/…`), because a token is
/// often carried there (`?api_key=…`, `/services/T0/B0/…`, `/TOKEN/v1`). A URL with neither
/// path nor query is shown whole; text that does not parse as a URL is shown as `(invalid URL)`.
/// `suffix` is a path cronsole itself appends (an agent's `/chat/completions`), shown after the
/// elision because it carries nothing of the operator's.
pub fn url_display(url: &str, suffix: &str) -> String {
    let Ok(u) = reqwest::Url::parse(url.trim()) else {
        return "(invalid URL)".to_string();
    };
    let host = u.host_str().unwrap_or("");
    let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
    let hidden = (u.path() != "/" && !u.path().is_empty()) || u.query().is_some();
    let suffix = suffix.trim_start_matches('/');
    match (hidden, suffix.is_empty()) {
        (true, true) => format!("{}://{host}{port}/…", u.scheme()),
        (true, false) => format!("{}://{host}{port}/…/{suffix}", u.scheme()),
        (false, true) => format!("{}://{host}{port}/", u.scheme()),
        (false, false) => format!("{}://{host}{port}/{suffix}", u.scheme()),
    }
}

/// The parts of a URL that may carry a token, to redact wherever they show up (a server that
/// echoes its request path in an error body): each path segment of at least
/// [`URL_TOKEN_MIN_CHARS`] characters, each query value, and the path (with its query) when it
/// has either; [`Secrets::new`] then drops what is shorter than [`MIN_SECRET_CHARS`].
pub fn url_tokens(url: &str) -> Vec<String> {
    let Ok(u) = reqwest::Url::parse(url.trim()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let segments: Vec<&str> = u
        .path_segments()
        .into_iter()
        .flatten()
        .filter(|s| s.chars().count() >= URL_TOKEN_MIN_CHARS)
        .collect();
    for s in &segments {
        push_forms(&mut out, s, false);
    }
    if let Some(q) = u.query() {
        push_forms(&mut out, &format!("{}?{q}", u.path()), true);
    } else if !segments.is_empty() {
        push_forms(&mut out, u.path(), false);
    }
    if let Some(q) = u.query() {
        for pair in q.split('&') {
            let value = pair.split_once('=').map_or(pair, |(_, v)| v);
            push_forms(&mut out, value, true);
        }
    }
    out.dedup();
    out
}

/// Every form a server may echo a URL part in (an error page often quotes the request back): as
/// sent; percent-decoded (and, in a
/// query, with `+` read as a space, as form decoding does); and each of those percent-encoded
/// once more — every reserved byte encoded (upper- and lower-case hex, `encodeURIComponent`
/// style), `/` kept (Python's `quote`), and space as `+` (`quote_plus`, Go's `QueryEscape`).
fn push_forms(out: &mut Vec<String>, sent: &str, query: bool) {
    let mut bases = vec![sent.to_string()];
    if let Some(d) = percent_decode(sent, false) {
        bases.push(d);
    }
    if query && let Some(d) = percent_decode(sent, true) {
        bases.push(d);
    }
    bases.dedup();
    for b in &bases {
        for form in [
            b.clone(),
            percent_encode(b, "", true, false),
            percent_encode(b, "", false, false),
            percent_encode(b, "/", true, false),
            percent_encode(b, "", true, true),
            percent_encode(b, "!'()*", true, false),
        ] {
            if !out.contains(&form) {
                out.push(form);
            }
        }
    }
}

/// `s` with `%XX` escapes decoded (and `+` as a space when `plus_space`); `None` when the
/// result would not be UTF-8 text (it could not appear in one either) or nothing changed.
fn percent_decode(s: &str, plus_space: bool) -> Option<String> {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(if plus_space && b[i] == b'+' {
            b' '
        } else {
            b[i]
        });
        i += 1;
    }
    String::from_utf8(out).ok().filter(|d| d != s)
}

/// `s` percent-encoded: every byte but ASCII letters, digits, `-._~` and those in `keep`
/// becomes `%XX` (`upper` hex digits or lower), a space `+` when `space_plus`.
fn percent_encode(s: &str, keep: &str, upper: bool, space_plus: bool) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || b"-._~".contains(&c) || keep.as_bytes().contains(&c) {
            out.push(c as char);
        } else if space_plus && c == b' ' {
            out.push('+');
        } else if upper {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push_str(&format!("%{c:02x}"));
        }
    }
    out
}

/// Shortest path segment [`url_tokens`] treats as a possible token (`v1`, `api`, `services`
/// and the like are shorter; a Slack webhook's or a feed's token is longer).
pub const URL_TOKEN_MIN_CHARS: usize = 12;

/// The configured API-key values (each agent's `api_key_env` value) that must never leave in
/// anything cronsole writes or prints: results, errors, reasons, notepad, diffs, sinks, logs.
/// Apply it before any truncation; [`Secrets::redact`] also removes a secret's leading part left
/// at the end of an already-cut text (command output is bounded while it is read).
#[derive(Clone, Default)]
pub struct Secrets {
    values: Vec<String>,
}

/// How many secrets, never their values: a `{:?}` of anything holding them goes to logs.
impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("count", &self.values.len())
            .finish()
    }
}

impl Secrets {
    /// Secrets from values (trimmed; shorter than [`MIN_SECRET_CHARS`] or duplicate → ignored).
    pub fn new(values: impl IntoIterator<Item = String>) -> Secrets {
        let mut v: Vec<String> = values
            .into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| s.chars().count() >= MIN_SECRET_CHARS)
            .collect();
        // Longest first, so a key that contains another is replaced whole.
        v.sort_by_key(|s| std::cmp::Reverse(s.len()));
        v.dedup();
        Secrets { values: v }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// These secrets and `more` (the same rules as [`Secrets::new`]).
    pub fn with(self, more: impl IntoIterator<Item = String>) -> Secrets {
        Secrets::new(self.values.into_iter().chain(more))
    }

    /// `s` with every secret replaced by [`REDACTED`]; borrowed when none occurs.
    pub fn redact<'a>(&self, s: &'a str) -> Cow<'a, str> {
        if self.values.is_empty() {
            return Cow::Borrowed(s);
        }
        let mut out = Cow::Borrowed(s);
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = Cow::Owned(out.replace(v.as_str(), REDACTED));
            }
        }
        if let Some(o) = self.redact_inner_partials(&out) {
            out = Cow::Owned(o);
        }
        // A secret cut by an earlier bound: its leading part at the end of the text or before
        // a truncation mark.
        for mark in [
            "",
            "…[truncated]",
            "…[output truncated]",
            "\n…[output truncated]",
        ] {
            let Some(body) = out.strip_suffix(mark) else {
                continue;
            };
            if let Some(n) = self.partial_tail(body, !mark.is_empty()) {
                let cut = body.len() - n;
                out = Cow::Owned(format!("{}{REDACTED}{mark}", &out[..cut]));
            }
        }
        out
    }

    /// Every string of a JSON value (object keys included) redacted in place: a secret written
    /// with JSON escapes (`\u0073k-…`, `\"`) is matched on its decoded text, which the raw JSON
    /// text would hide.
    pub fn redact_json(&self, v: &mut serde_json::Value) {
        use serde_json::Value;
        if self.values.is_empty() {
            return;
        }
        match v {
            Value::String(s) => {
                if let Cow::Owned(o) = self.redact(s) {
                    *s = o;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.redact_json(i)),
            Value::Object(m) => {
                let entries = std::mem::take(m);
                for (k, mut item) in entries {
                    self.redact_json(&mut item);
                    m.insert(self.redact(&k).into_owned(), item);
                }
            }
            _ => {}
        }
    }

    /// Text that should be JSON but may not parse (a model's malformed arguments), redacted:
    /// as a JSON value when it parses; otherwise as written, and — when its escapes decoded
    /// reveal a secret the raw text hides — as that decoded text, redacted.
    pub fn redact_json_text(&self, raw: &str) -> String {
        if self.values.is_empty() {
            return raw.to_string();
        }
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(raw) {
            let mut red = v.clone();
            self.redact_json(&mut red);
            // Nothing to hide: the text as written.
            return if red == v {
                raw.to_string()
            } else {
                red.to_string()
            };
        }
        let plain = self.redact(raw);
        let decoded = json_unescape(&plain);
        match self.redact(&decoded) {
            Cow::Owned(o) => o,
            Cow::Borrowed(_) => plain.into_owned(),
        }
    }

    /// Redact in place (for `Option<String>` fields).
    pub fn redact_opt(&self, s: &mut Option<String>) {
        if let Some(v) = s
            && let Cow::Owned(o) = self.redact(v)
        {
            *v = o;
        }
    }

    /// `s` with the leading parts of secrets it holds inside the text removed (`None` when it
    /// holds none): a part that ends a line (the same rule as at the bare end of a text: 8+
    /// characters, not letters only), or one anywhere that is at least half its secret. So a
    /// text and each line of it (a notepad value, a field cut out of it) redact alike: a key cut
    /// where a line ends never survives in the whole text while its line alone loses it.
    fn redact_inner_partials(&self, s: &str) -> Option<String> {
        let mut cuts: Vec<(usize, usize)> = Vec::new();
        for v in &self.values {
            let Some(lead) = v.get(..MIN_SECRET_CHARS.min(v.len())) else {
                continue;
            };
            for (at, _) in s.match_indices(lead) {
                let rest = &s[at..];
                let n = rest
                    .bytes()
                    .zip(v.bytes())
                    .take_while(|(a, b)| a == b)
                    .count();
                let mut n = n.min(v.len() - 1);
                while n > 0 && !(v.is_char_boundary(n) && rest.is_char_boundary(n)) {
                    n -= 1;
                }
                let part = &v[..n];
                let after = &rest[n..];
                // The end of the text is the cut rule's own (marks included).
                let ends_line = after.starts_with('\n') || after.starts_with("\r\n");
                let half = 2 * part.chars().count() >= v.chars().count();
                let reads_as_cut = part.chars().count() >= MIN_SECRET_CHARS
                    && !part.chars().all(char::is_alphabetic);
                if reads_as_cut && (ends_line || (half && !after.is_empty())) {
                    cuts.push((at, at + n));
                }
            }
        }
        if cuts.is_empty() {
            return None;
        }
        cuts.sort_unstable();
        let mut out = String::with_capacity(s.len());
        let mut from = 0;
        for (a, b) in cuts {
            if a < from {
                continue;
            }
            out.push_str(&s[from..a]);
            out.push_str(REDACTED);
            from = b;
        }
        out.push_str(&s[from..]);
        Some(out)
    }

    /// Length in bytes of the longest secret prefix that `body` ends with and that reads as a
    /// cut secret. Before a truncation mark (`marked`) the cut is certain and
    /// [`MIN_PARTIAL_CHARS`] suffice. At the bare end of a text the prefix must not be an
    /// ordinary word: at least [`MIN_SECRET_CHARS`] characters and not letters only — so
    /// `unpriced model` keeps its last word when a key begins `modelkey-`, while a key cut
    /// to `sk-live-AB` is still removed.
    fn partial_tail(&self, body: &str, marked: bool) -> Option<usize> {
        let reads_as_cut = |p: &str| {
            marked || (p.chars().count() >= MIN_SECRET_CHARS && !p.chars().all(char::is_alphabetic))
        };
        self.values
            .iter()
            .filter_map(|v| {
                (MIN_PARTIAL_CHARS..v.len())
                    .rev()
                    .filter(|&n| v.is_char_boundary(n))
                    .find(|&n| body.ends_with(&v[..n]) && reads_as_cut(&v[..n]))
            })
            .max()
    }
}

/// `s` with JSON string escapes decoded wherever they occur (`\"`, `\\`, `\/`, `\b`, `\f`,
/// `\n`, `\r`, `\t`, `\uXXXX` with surrogate pairs); anything else is kept as written.
fn json_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    let hex4 = |it: &mut std::iter::Peekable<std::str::Chars<'_>>| -> Option<u32> {
        let h: String = it.clone().take(4).collect();
        let n = (h.len() == 4).then(|| u32::from_str_radix(&h, 16).ok())??;
        it.nth(3);
        Some(n)
    };
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.peek().copied() {
            Some(e @ ('"' | '\\' | '/')) => {
                it.next();
                out.push(e);
            }
            Some(e @ ('b' | 'f' | 'n' | 'r' | 't')) => {
                it.next();
                out.push(match e {
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    _ => '\t',
                });
            }
            Some('u') => {
                let mut look = it.clone();
                look.next();
                let Some(hi) = hex4(&mut look) else {
                    out.push(c);
                    continue;
                };
                let mut code = hi;
                if (0xD800..0xDC00).contains(&hi) {
                    let mut pair = look.clone();
                    if pair.next() == Some('\\')
                        && pair.next() == Some('u')
                        && let Some(lo) = hex4(&mut pair)
                        && (0xDC00..0xE000).contains(&lo)
                    {
                        code = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                        look = pair;
                    }
                }
                match char::from_u32(code) {
                    Some(ch) => {
                        out.push(ch);
                        it = look;
                    }
                    None => out.push(c),
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// JSON output (`--json` of every command, `--log-format json`) under the same policy: every
/// unsafe character inside a string is written as a `\uXXXX` escape (serde_json escapes C0
/// controls itself but writes DEL, C1 controls, bidi overrides and invisible characters as
/// themselves). The value a JSON reader gets back is unchanged — only the bytes on the terminal
/// are inert — so scripts still see exactly what was stored. Wraps serde_json's compact or
/// pretty formatter; layout is theirs, byte for byte.
///
/// Money is written by one rule too: the number of a member named as money ([`is_money_key`])
/// is [`json_usd`]'s, so a sum's binary noise never reaches a script.
#[derive(Debug, Clone)]
pub struct InertJson<F> {
    inner: F,
    /// The object key being written (its fragments), while one is.
    key: Option<String>,
    /// Whether the member whose value is being written is money.
    money: bool,
}

impl<F> InertJson<F> {
    fn new(inner: F) -> InertJson<F> {
        InertJson {
            inner,
            key: None,
            money: false,
        }
    }
}

/// Seconds in a reason or a message: to the tenth, without a trailing `.0` (`5`, `2.5`), and
/// to the hundredth below a second. A bound the run's deadline cut short is 4.997356349 s,
/// and its nine decimals say nothing more than "5".
pub fn secs_words(secs: f64) -> String {
    let scale = if secs.abs() < 1.0 { 100.0 } else { 10.0 };
    let r = (secs * scale).round() / scale;
    if !r.is_finite() {
        return secs.to_string();
    }
    // `Display` of an f64 prints the shortest form that reads back: 5.0 as `5`, 2.5 as `2.5`.
    if r == 0.0 { "0".into() } else { r.to_string() }
}

/// Decimals every money amount keeps in JSON output: nine, which drops the binary noise of sums
/// (`0.30000000000000004`) and keeps every digit a price per million tokens produces.
pub const JSON_USD_DECIMALS: i32 = 9;

/// Money in JSON: rounded to [`JSON_USD_DECIMALS`] places. Zero is always `0.0`, never `-0.0`;
/// a non-finite amount (never stored) is `0.0`.
pub fn json_usd(x: f64) -> f64 {
    let scale = 10f64.powi(JSON_USD_DECIMALS);
    let r = if !x.is_finite() {
        0.0
    } else if x.abs() >= 1e15 {
        // No binary noise to drop at nine decimals (and `x * scale` could overflow).
        x
    } else {
        (x * scale).round() / scale
    };
    // -0.0 == 0.0: this turns a negative zero into a positive one.
    if r == 0.0 { 0.0 } else { r }
}

/// Whether a JSON member named `key` holds an amount of money: `…_usd` (`cost_usd`,
/// `period_cost_usd`, `max_cost_usd`, …), a reservation's `usd`, and `stats`' two money
/// figures whose names predate the suffix.
pub fn is_money_key(key: &str) -> bool {
    key.ends_with("_usd") || matches!(key, "usd" | "cost_per_execution" | "remaining_budget")
}

/// Round every money member ([`is_money_key`]) of `v`, at any depth, to [`json_usd`]: for
/// JSON built as a value and sent elsewhere than through [`InertJson`] (a delivery's payload).
pub fn round_money(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match x {
                    serde_json::Value::Number(n) if is_money_key(k) => {
                        if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                            *x = serde_json::json!(json_usd(f));
                        }
                    }
                    _ => round_money(x),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(round_money),
        _ => {}
    }
}

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for InertJson<F> {
    fn write_f64<W: ?Sized + std::io::Write>(&mut self, w: &mut W, v: f64) -> std::io::Result<()> {
        let v = if self.money { json_usd(v) } else { v };
        self.inner.write_f64(w, v)
    }
    fn end_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.money = self.key.take().is_some_and(|k| is_money_key(&k));
        self.inner.end_object_key(w)
    }
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        if let Some(k) = &mut self.key {
            k.push_str(fragment);
        }
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if is_unsafe(c) {
                w.write_all(&fragment.as_bytes()[start..i])?;
                // Every unsafe character is in the Basic Multilingual Plane: one escape each.
                write!(w, "\\u{:04x}", c as u32)?;
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.inner.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.key = Some(String::new());
        self.inner.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.money = false;
        self.inner.end_object_value(w)
    }
}

/// A JSON serializer writing one compact line of inert JSON to `w`.
pub fn json_serializer<W: std::io::Write>(
    w: W,
) -> serde_json::Serializer<W, InertJson<serde_json::ser::CompactFormatter>> {
    serde_json::Serializer::with_formatter(w, InertJson::new(serde_json::ser::CompactFormatter))
}

/// A JSON serializer writing pretty-printed inert JSON to `w` (serde_json's two-space layout).
pub fn json_serializer_pretty<'a, W: std::io::Write>(
    w: W,
) -> serde_json::Serializer<W, InertJson<serde_json::ser::PrettyFormatter<'a>>> {
    serde_json::Serializer::with_formatter(
        w,
        InertJson::new(serde_json::ser::PrettyFormatter::new()),
    )
}

/// `serde_json::to_string` with every unsafe character escaped (see [`InertJson`]).
pub fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(128);
    v.serialize(&mut json_serializer(&mut out))?;
    // The serializer writes only valid UTF-8 (its input is `str` and ASCII escapes).
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `serde_json::to_string_pretty` with every unsafe character escaped (see [`InertJson`]).
pub fn to_json_pretty<T: serde::Serialize + ?Sized>(v: &T) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(128);
    v.serialize(&mut json_serializer_pretty(&mut out))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod url_tests {
    use super::*;

    /// A token in a URL's query or path is never printed.
    #[test]
    fn url_display_elides_path_and_query() {
        let d = |u| url_display(u, "");
        assert_eq!(
            d("http://127.0.0.1:1/v1?api_key=QUERYSECRET789"),
            "http://127.0.0.1:1/…"
        );
        assert_eq!(
            d("https://h.example/URLPATHSECRET123/v1"),
            "https://h.example/…"
        );
        assert_eq!(d("https://h.example"), "https://h.example/");
        assert_eq!(d("not a url ?pw=SECRET"), "(invalid URL)");
        assert_eq!(
            url_display("http://h:8080/T0K3N/v1", "/chat/completions"),
            "http://h:8080/…/chat/completions"
        );
        assert_eq!(
            url_display("http://h", "v1/messages"),
            "http://h/v1/messages"
        );
    }

    #[test]
    fn url_tokens_feed_the_redactor() {
        let s = Secrets::new(url_tokens(
            "http://h/services/T0/B0/HOOKSECRET111?pw=HOOKPW222&x=1",
        ));
        let echoed = "bad hook /services/T0/B0/HOOKSECRET111?pw=HOOKPW222&x=1 pw=HOOKPW222";
        let out = s.redact(echoed);
        assert!(
            !out.contains("HOOKSECRET111") && !out.contains("HOOKPW222"),
            "{out}"
        );
        let short = Secrets::new(url_tokens("https://api.openai.com/v1"));
        assert!(short.is_empty(), "nothing of a plain base URL is a token");
        let t = url_tokens("http://h/URLPATHSECRET123/v1");
        assert_eq!(t[0], "URLPATHSECRET123");
        assert!(t.contains(&"/URLPATHSECRET123/v1".to_string()), "{t:?}");
        assert!(t.contains(&"%2FURLPATHSECRET123%2Fv1".to_string()), "{t:?}");
    }

    /// A token is redacted in every form a server may echo it in — as written,
    /// percent-decoded (`+` as a space in a query), and percent-encoded once more.
    #[test]
    fn url_tokens_cover_decoded_and_reencoded_forms() {
        let s = Secrets::new(url_tokens(
            "http://h/dec/v1?key=DecTok%2BSecret%2FValue%3D42&sig=Ab+Cd/Ef=GhIjKl06",
        ));
        for echoed in [
            // as written
            "DecTok%2BSecret%2FValue%3D42",
            "Ab+Cd/Ef=GhIjKl06",
            // decoded (Python's parse_qs, repr'd)
            "invalid credentials: {'key': ['DecTok+Secret/Value=42']}",
            "{'sig': ['Ab Cd/Ef=GhIjKl06']}",
            // encoded once more
            "no route for DecTok%252BSecret%252FValue%253D42",
            "Ab%2BCd%2FEf%3DGhIjKl06",
            "Ab%2bCd%2fEf%3dGhIjKl06",
            "Ab%2BCd/Ef%3DGhIjKl06",
            "Ab%20Cd%2FEf%3DGhIjKl06",
            "Ab+Cd%2FEf%3DGhIjKl06",
            "DecTok%2bSecret%2fValue%3d42",
            // the whole path and query, quoted
            "%2Fdec%2Fv1%3Fkey%3DDecTok%252BSecret%252FValue%253D42%26sig%3DAb%2BCd%2FEf%3DGhIjKl06",
        ] {
            let out = s.redact(echoed);
            for leak in ["Secret", "Value", "GhIjKl06", "Cd"] {
                assert!(!out.contains(leak), "{echoed} -> {out}");
            }
        }
        // A path segment: no `+`-as-space reading (that is a query rule), but decoded and
        // re-encoded forms are covered.
        let p = Secrets::new(url_tokens("http://h/Path%2BTok%2FSecret99/v1"));
        for echoed in ["Path+Tok/Secret99", "Path%252BTok%252FSecret99"] {
            assert!(!p.redact(echoed).contains("Secret99"), "{echoed}");
        }
        assert_eq!(percent_decode("a%2Bb+c", true).as_deref(), Some("a+b c"));
        assert_eq!(percent_decode("a%2Bb+c", false).as_deref(), Some("a+b+c"));
        assert_eq!(percent_decode("plain", false), None, "unchanged");
        assert_eq!(percent_decode("%FF%FE", false), None, "not UTF-8");
        assert_eq!(percent_decode("bad%zz%4", false), None, "no escape");
        assert_eq!(percent_encode("a b/+é", "", true, true), "a+b%2F%2B%C3%A9");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_in_words_drop_the_noise_of_a_cut_bound() {
        assert_eq!(secs_words(4.997356349), "5");
        assert_eq!(secs_words(5.0), "5");
        assert_eq!(secs_words(2.54), "2.5");
        assert_eq!(secs_words(0.25), "0.25");
        assert_eq!(secs_words(0.0004), "0");
        assert_eq!(secs_words(86_400.0), "86400");
        let e = crate::action::llm::LlmError::Timeout {
            url: "http://127.0.0.1:1/v1".into(),
            secs: 4.997356349,
        };
        assert!(e.to_string().contains("within 5s (per-attempt"), "{e}");
    }

    fn console_inert(s: &str) -> bool {
        !s.chars().any(is_unsafe)
    }

    #[test]
    fn a_debug_print_of_secrets_shows_how_many_not_what() {
        let s = Secrets::new(["sk-live-0123456789abcdef".to_string()]);
        let shown = format!("{s:?} {s:#?}");
        assert!(!shown.contains("sk-live"), "{shown}");
        assert!(shown.contains("count: 1"), "{shown}");
    }

    /// `--json` must not carry U+202E or the other bidi controls raw: a terminal showing the
    /// output would reorder it.
    #[test]
    fn json_escapes_every_unsafe_character_and_round_trips() {
        let nasty = "a\u{202e}b\u{2066}c\u{1b}]0;t\u{7}d\u{7f}e\u{9b}f\u{200b}g\u{2028}h\u{feff}i \
                     wörld \u{1F600}\n\t\"\\";
        let v = serde_json::json!({ "k\u{202a}": [nasty, 1, null], "n": 2.5 });
        for text in [to_json(&v).unwrap(), to_json_pretty(&v).unwrap()] {
            assert!(!text.chars().any(|c| is_unsafe(c) && c != '\n'), "{text:?}");
            for esc in [
                "\\u202e", "\\u2066", "\\u001b", "\\u0007", "\\u007f", "\\u009b",
            ] {
                assert!(text.contains(esc), "{esc} in {text}");
            }
            assert!(text.contains("\\u202a\""), "keys too: {text}");
            assert!(
                text.contains("wörld \u{1F600}"),
                "safe non-ASCII stays: {text}"
            );
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back, v, "a JSON reader gets the exact value back");
        }
        // The layout is serde_json's, byte for byte, when nothing needs escaping.
        let plain = serde_json::json!({"a": [1, {"b": "c"}], "d": []});
        assert_eq!(
            to_json(&plain).unwrap(),
            serde_json::to_string(&plain).unwrap()
        );
        assert_eq!(
            to_json_pretty(&plain).unwrap(),
            serde_json::to_string_pretty(&plain).unwrap()
        );
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        assert!(matches!(line("hello wörld"), Cow::Borrowed("hello wörld")));
        assert!(matches!(visible("a\tb\nc"), Cow::Borrowed(_)));
    }

    #[test]
    fn strips_csi_osc_and_controls() {
        let s =
            "a\u{1b}[31mred\u{1b}[0m b\u{1b}]0;title\u{07}c\u{1b}]52;c;Zm9v\u{1b}\\d\u{7}\u{0}e";
        assert_eq!(line(s), "ared bcde");
    }

    #[test]
    fn strips_c1_8bit_csi_bidi_and_zero_width() {
        let s = "x\u{9b}2Jy\u{85}z\u{202e}evil\u{2066}w\u{200b}v\u{feff}u\u{200d}t";
        assert_eq!(line(s), "xyzevilwvut");
    }

    #[test]
    fn tabs_become_spaces_and_newlines_split() {
        assert_eq!(line("a\tb"), "a   b");
        assert_eq!(
            lines("a\r\nb\rc\n\td\u{2028}e"),
            vec!["a", "b", "c", "    d", "e"]
        );
        assert_eq!(line("a\r\nb"), "a b");
    }

    #[test]
    fn dcs_and_two_byte_escapes_are_removed() {
        assert_eq!(
            line("a\u{1b}Pq#0;2;0;0;0\u{1b}\\b\u{1b}7c\u{1b}(Bd"),
            "abcd"
        );
    }

    #[test]
    fn unterminated_sequences_do_not_leak() {
        assert_eq!(line("a\u{1b}]0;never ends"), "a");
        assert_eq!(line("a\u{1b}["), "a");
        assert_eq!(line("trailing\u{1b}"), "trailing");
    }

    #[test]
    fn printed_forms_show_what_was_there() {
        assert_eq!(visible("a\u{1b}[2Jb\u{7}\u{7f}"), "a^[[2Jb^G^?");
        assert_eq!(
            visible("pay\u{202e}cod.exe\u{200b}"),
            "pay\\u{202e}cod.exe\\u{200b}"
        );
        assert_eq!(visible("a\n\tb"), "a\n\tb");
        assert_eq!(visible_line("a\nb\tc\u{9b}"), "a\\nb c\\u{9b}");
    }

    #[test]
    fn secrets_are_redacted_whole_and_when_cut() {
        let s = Secrets::new(["sk-live-ABCDEFGH1234".to_string(), "short".to_string()]);
        assert_eq!(
            s.redact("key=sk-live-ABCDEFGH1234 again sk-live-ABCDEFGH1234"),
            "key=[redacted] again [redacted]"
        );
        // Too short to redact by value (validate warns instead).
        assert_eq!(s.redact("short"), "short");
        // Cut by an earlier bound.
        assert_eq!(s.redact("x sk-live-ABC"), "x [redacted]");
        assert_eq!(
            s.redact("x sk-live-AB…[truncated]"),
            "x [redacted]…[truncated]"
        );
        assert_eq!(s.redact("x sk-"), "x sk-", "too short a tail to tell");
        // Only whole values, or a cut one: an ordinary last word that begins a key stays.
        let k = Secrets::new(["modelkey-SEKRET-123".to_string()]);
        assert_eq!(k.redact("unpriced model"), "unpriced model");
        assert_eq!(k.redact("unpriced modelkey"), "unpriced modelkey");
        assert_eq!(
            k.redact("reason: unpriced model; key modelkey-SEKRET-123"),
            "reason: unpriced model; key [redacted]"
        );
        assert_eq!(k.redact("x modelkey-SE"), "x [redacted]");
        assert_eq!(k.redact("x model…[truncated]"), "x [redacted]…[truncated]");
    }

    /// A key's leading part inside a text is redacted as it would be in that line alone: at
    /// the end of a line by the bare-end rule, anywhere once it is half the key or more. So a
    /// notepad value and the reply it came from (the transcript, a delivery) agree.
    #[test]
    fn a_cut_secret_inside_a_text_is_redacted_as_in_its_line_alone() {
        let secret = "Zq7tool-secret-value-9911XY";
        let s = Secrets::new([secret.to_string()]);
        let reply = "answer [redacted]\n```notepad\nk3=Zq7tool-secret-val\n```";
        assert_eq!(
            s.redact(reply),
            "answer [redacted]\n```notepad\nk3=[redacted]\n```"
        );
        // The line alone, as the notepad keeps it: the same.
        assert_eq!(s.redact("Zq7tool-secret-val"), "[redacted]");
        assert_eq!(
            s.redact("k3=Zq7tool-secret-val\r\nnext"),
            "k3=[redacted]\r\nnext"
        );
        // Half the key or more, mid-line.
        assert_eq!(
            s.redact("see Zq7tool-secret-val and more"),
            "see [redacted] and more"
        );
        // A short leading part mid-line is an ordinary word, kept; at a line end, letters only
        // stay too.
        assert_eq!(s.redact("Zq7tool-s is a tag"), "Zq7tool-s is a tag");
        let k = Secrets::new(["modelkey-SEKRET-123".to_string()]);
        assert_eq!(
            k.redact("unpriced modelkey\nnext"),
            "unpriced modelkey\nnext"
        );
        assert_eq!(k.redact("a modelkey-SE\nnext"), "a [redacted]\nnext");
        assert_eq!(
            k.redact("several modelkey-SEKRET-123 modelkey-SEK\n"),
            "several [redacted] [redacted]\n"
        );
    }

    /// A secret in JSON is matched on its decoded strings, keys included, whatever escapes
    /// spell it; JSON that does not parse is matched as written and with its escapes decoded.
    #[test]
    fn secrets_in_json_are_redacted_however_they_are_escaped() {
        let s = Secrets::new([
            "ts-SEKRET-1234".to_string(),
            r#"qs-"quoted\back-dddd"#.to_string(),
        ]);
        let escaped =
            r#"{"q":"\u0074\u0073-SEKRET-1234","r":"qs-\"quoted\\back-dddd","ts-SEKRET-1234":1}"#;
        let out = s.redact_json_text(escaped);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&out).unwrap(),
            serde_json::json!({"q": "[redacted]", "r": "[redacted]", "[redacted]": 1})
        );
        // Nothing secret: the text as written.
        assert_eq!(s.redact_json_text(r#"{ "a": 1 }"#), r#"{ "a": 1 }"#);
        // Not JSON (cut, malformed): the escapes decoded when they hide a secret.
        let cut = r#"{"q":"\u0074\u0073-SEKRET-1234", "r": "#;
        assert_eq!(s.redact_json_text(cut), r#"{"q":"[redacted]", "r": "#);
        assert_eq!(
            s.redact_json_text(r#"{"q": ts-SEKRET-1234"#),
            r#"{"q": [redacted]"#
        );
        assert_eq!(json_unescape(r#"a\ud83d\ude00\n\x"#), "a😀\n\\x");
        assert!(matches!(s.redact("nothing"), Cow::Borrowed(_)));
        assert!(Secrets::new(Vec::new()).is_empty());
    }

    proptest::proptest! {
        /// The one property: no rendering lets an unsafe character through (the printed forms
        /// keep only `\n`/`\t` where they keep lines).
        #[test]
        fn no_rendering_lets_an_unsafe_character_through(
            s in proptest::collection::vec(proptest::char::any(), 0..200)
        ) {
            let s: String = s.into_iter().collect();
            proptest::prop_assert!(console_inert(&line(&s)));
            for l in lines(&s) {
                proptest::prop_assert!(console_inert(&l));
            }
            proptest::prop_assert!(console_inert(&visible_line(&s)));
            proptest::prop_assert!(!visible_tabs(&s).chars().any(|c| is_unsafe(c) && c != '\t'));
            proptest::prop_assert!(
                !visible(&s).chars().any(|c| is_unsafe(c) && c != '\n' && c != '\t')
            );
        }

        #[test]
        fn a_secret_never_survives_redaction(
            pre in "\\PC{0,20}", post in "\\PC{0,20}", key in "[A-Za-z0-9_-]{8,40}"
        ) {
            let s = Secrets::new([key.clone()]);
            let out = s.redact(&format!("{pre}{key}{post}")).into_owned();
            proptest::prop_assert!(!out.contains(&key), "{out:?}");
        }
    }
}
