//! placeholder: command action (gate helper)
