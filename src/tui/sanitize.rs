//! Sanitising outside text before it is drawn: a terminal obeys escape sequences, so a
//! page or a reply could redraw the screen or hide a row. The policy lives in
//! [`crate::text`] (one policy for every output); the console keeps these names for its views.
//!
//! Owns: nothing of its own. Must not touch: layout, colour, the terminal.

pub use crate::text::{line, lines};
