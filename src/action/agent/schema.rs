//! Argument validation: each offered tool's JSON Schema compiled once per run, every call's
//! arguments checked against it before dispatch.
//!
//! Owns: compiling the schemas (draft-07 and 2020-12; a schema without `$schema` is read as
//! 2020-12, the MCP default) and turning a validation failure into a short text the model can
//! act on. Must not touch: dispatch, the transcript.
//!
//! A schema is untrusted input (a server wrote it): nothing it names is ever fetched. The
//! compiler's loader refuses every URL, so a `$ref` to anything outside the schema itself
//! (`http:`, `file:`) makes the schema unusable, and a call to that tool is refused with an
//! error result that says so, rather than dispatched unchecked. The meta-schemas the validator
//! embeds are the only documents it reads. A panic inside the validator (a bug on hostile
//! input) is caught and treated the same way.

use std::panic::{AssertUnwindSafe, catch_unwind};

use serde_json::Value;

/// Validation errors shown to the model are cut to this many characters.
const ERROR_MAX_CHARS: usize = 1000;

/// The loader of a schema compiler: loads nothing.
struct RefuseAll;

impl boon::UrlLoader for RefuseAll {
    fn load(&self, url: &str) -> Result<Value, Box<dyn std::error::Error>> {
        Err(format!("'{url}' is not loaded: a tool's schema may only refer to itself").into())
    }
}

/// The compiled argument schemas of a run's offered tools, by index in the offer.
pub struct ArgSchemas {
    schemas: boon::Schemas,
    compiled: Vec<Result<boon::SchemaIndex, String>>,
}

impl ArgSchemas {
    /// Compile each schema once (an unusable one keeps the reason).
    pub fn compile<'a>(schemas: impl IntoIterator<Item = &'a Value>) -> ArgSchemas {
        let mut out = boon::Schemas::new();
        let compiled = schemas
            .into_iter()
            .enumerate()
            .map(|(i, s)| compile_one(i, s, &mut out))
            .collect();
        ArgSchemas {
            schemas: out,
            compiled,
        }
    }

    /// `Ok` when `args` are valid for tool `index`; else the text the model is given.
    pub fn check(&self, index: usize, args: &Value) -> Result<(), String> {
        let idx = match self.compiled.get(index) {
            Some(Ok(idx)) => *idx,
            Some(Err(why)) => {
                return Err(format!(
                    "the tool's argument schema cannot be used ({why}), so the call was not run"
                ));
            }
            None => return Err("no schema for this tool".to_string()),
        };
        let r = catch_unwind(AssertUnwindSafe(|| {
            self.schemas
                .validate(args, idx)
                .map_err(|e| format!("{e:#}"))
        }));
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!(
                "the arguments do not match the tool's schema: {}",
                crate::model::truncate_marked(&e, ERROR_MAX_CHARS)
            )),
            Err(_) => Err("the tool's argument schema could not be checked".to_string()),
        }
    }
}

fn compile_one(
    i: usize,
    schema: &Value,
    out: &mut boon::Schemas,
) -> Result<boon::SchemaIndex, String> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err("it is not a JSON Schema object".to_string());
    }
    let loc = format!("urn:cronsole:tool-arguments:{i}");
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut c = boon::Compiler::new();
        c.set_default_draft(boon::Draft::V2020_12);
        c.use_loader(Box::new(RefuseAll));
        c.add_resource(&loc, schema.clone())
            .map_err(|e| e.to_string())?;
        c.compile(&loc, out).map_err(|e| format!("{e:#}"))
    }));
    match r {
        Ok(r) => r.map_err(|e| crate::model::truncate_marked(&e, 300)),
        Err(_) => Err("the schema broke the validator".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn draft_07_and_2020_12_schemas_validate_arguments() {
        let s = ArgSchemas::compile(&[
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                   "properties": {"path": {"type": "string"}}, "required": ["path"],
                   "additionalProperties": false}),
            json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 5},
                   "l": {"type": "array", "prefixItems": [{"type": "string"}]}}}),
        ]);
        assert_eq!(s.check(0, &json!({"path": "/a"})), Ok(()));
        let e = s.check(0, &json!({})).unwrap_err();
        assert!(e.contains("path"), "{e}");
        let e = s.check(0, &json!({"path": "/a", "extra": 1})).unwrap_err();
        assert!(e.contains("extra"), "{e}");
        assert_eq!(s.check(1, &json!({"n": 3})), Ok(()));
        assert!(s.check(1, &json!({"n": 9})).is_err());
        assert!(s.check(1, &json!({"n": "three"})).is_err());
        // 2020-12's `prefixItems`, read without a `$schema` (the MCP default).
        assert_eq!(s.check(1, &json!({"l": ["a", 1]})), Ok(()));
        assert!(s.check(1, &json!({"l": [1]})).is_err());
    }

    #[test]
    fn a_remote_or_file_ref_is_never_loaded_and_the_call_is_refused() {
        let s = ArgSchemas::compile(&[
            json!({"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/s.json"}}}),
            json!({"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}}),
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/s"}},
                   "$defs": {"s": {"type": "string"}}}),
            json!("not a schema"),
        ]);
        for i in 0..2 {
            let e = s.check(i, &json!({"a": 1})).unwrap_err();
            assert!(e.contains("cannot be used"), "{e}");
        }
        // A reference inside the schema itself is fine.
        assert_eq!(s.check(2, &json!({"a": "x"})), Ok(()));
        assert!(s.check(2, &json!({"a": 1})).is_err());
        assert!(s.check(3, &json!({})).is_err());
        assert!(s.check(9, &json!({})).is_err());
    }
}
