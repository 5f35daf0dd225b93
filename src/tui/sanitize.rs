//! Sanitising outside text before it is drawn (SPEC §13.1, §15): command output, web pages,
//! model replies, diffs and even job names come from places we do not control, and a single
//! stray `ESC ] 52 ;` or `ESC [ 2 J` would let them rewrite the operator's clipboard or screen.
//!
//! Owns: turning arbitrary text into inert, printable text. Must not touch: layout, colour,
//! the terminal. Rules: ESC sequences (CSI, OSC, DCS/SOS/PM/APC strings, two-byte escapes) are
//! removed whole; C0 and C1 control characters and DEL are removed; a tab becomes spaces (to the
//! next multiple of 4 columns of the line so far); newlines become a space in the one-line form
//! ([`line`]) and split lines in the multi-line form ([`lines`]); bidirectional override and
//! isolate characters (which can make text read differently from what it is) are removed.

use std::borrow::Cow;

const TAB_WIDTH: usize = 4;

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

fn needs_work(c: char) -> bool {
    (c as u32) < 0x20 || ('\u{7F}'..='\u{9F}').contains(&c) || is_bidi_control(c)
}

/// One line of inert text: every escape sequence and control character removed, tabs expanded,
/// line breaks turned into single spaces. Borrowed when nothing had to change (the common case).
pub fn line(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_work) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(clean(s, true))
}

/// Multi-line text as inert lines (each sanitised as by [`line`], split on `\n`; `\r\n` and a
/// lone `\r` also end a line).
pub fn lines(s: &str) -> Vec<String> {
    let cleaned = clean(s, false);
    cleaned.split('\n').map(str::to_string).collect()
}

/// The common implementation; `one_line` maps line breaks to a space instead of keeping `\n`.
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
            '\r' | '\n' => {
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
            c if needs_work(c) => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    fn inert(s: &str) -> bool {
        !s.chars().any(needs_work)
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        assert!(matches!(line("hello wörld"), Cow::Borrowed("hello wörld")));
    }

    #[test]
    fn strips_csi_osc_and_controls() {
        let s =
            "a\u{1b}[31mred\u{1b}[0m b\u{1b}]0;title\u{07}c\u{1b}]52;c;Zm9v\u{1b}\\d\u{7}\u{0}e";
        assert_eq!(line(s), "ared bcde");
    }

    #[test]
    fn strips_c1_and_8bit_csi_and_bidi() {
        let s = "x\u{9b}2Jy\u{85}z\u{202e}evil\u{2066}w";
        assert_eq!(line(s), "xyzevilw");
    }

    #[test]
    fn tabs_become_spaces_and_newlines_split() {
        assert_eq!(line("a\tb"), "a   b");
        assert_eq!(lines("a\r\nb\rc\n\td"), vec!["a", "b", "c", "    d"]);
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

    proptest::proptest! {
        #[test]
        fn output_never_contains_controls(s in proptest::collection::vec(proptest::char::any(), 0..200)) {
            let s: String = s.into_iter().collect();
            proptest::prop_assert!(inert(&line(&s)));
            for l in lines(&s) {
                proptest::prop_assert!(inert(&l));
            }
        }
    }
}
