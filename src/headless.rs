//! placeholder: headless (being written)
