//! The journald-friendly log format for `--log-to stderr`: one line per event, no timestamp
//! (the journal adds its own), no colours, and the syslog priority as the `<N>` prefix that
//! journald reads from a service's stderr (`<3>` error, `<4>` warning, `<6>` info, `<7>`
//! debug/trace), then `target: message key=value…`.
//!
//! Owns: that line format. Must not touch: where logs go (the binary decides).

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The syslog priority journald expects for a tracing level.
pub fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// `FormatEvent` writing `<prio>target: message fields`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Journald;

impl<S, N> FormatEvent<S, N> for Journald
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        write!(writer, "<{}>{}: ", priority(meta.level()), meta.target())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}
