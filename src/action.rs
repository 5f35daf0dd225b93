//! placeholder: action (being written)
