//! placeholder: testkit llm
