//! Sanitising outside text before it is drawn (SPEC §13.1, §15). The policy lives in
//! [`crate::text`] (one policy for every output); the console keeps these names for its views.
//!
//! Owns: nothing of its own. Must not touch: layout, colour, the terminal.

pub use crate::text::{line, lines};
