//! placeholder: llm action (llm helper)
