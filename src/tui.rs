//! placeholder: tui (being written)
