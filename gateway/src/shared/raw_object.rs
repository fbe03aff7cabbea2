//! A JSON object whose member values stay as the client wrote them. The gateway reads a few
//! members of a request and rewrites a few more before forwarding it; building a value tree of
//! the rest (a long prompt, a conversation) only to print it again would cost more than the
//! forwarding itself.

use bytes::Bytes;
use indexmap::IndexMap;
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// A JSON object: member names in their order, each value as its raw JSON text. It
/// deserializes from any JSON object; a repeated member keeps its last value, as in serde_json.
#[derive(Debug, Clone, Default)]
pub struct RawObject(IndexMap<String, Box<RawValue>>);

impl RawObject {
    /// The raw value of member `key`.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.get(key).map(|v| &**v)
    }

    /// Member `key` read as a `T`; `None` when it is absent or is not a `T`.
    pub fn get_as<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        serde_json::from_str(self.get(key)?.get()).ok()
    }

    /// The object as compact JSON text with `changes` made: a changed member keeps its place,
    /// a new one goes at the end, and one changed to `None` is left out (of several changes to
    /// one key, the last counts). Every other value is copied as it came.
    pub fn to_bytes_with(&self, changes: &[Change]) -> Bytes {
        let change = |key: &str| changes.iter().rev().find(|(k, _)| *k == key);
        let size: usize = self
            .0
            .iter()
            .map(|(k, v)| k.len() + v.get().len())
            .chain(
                changes
                    .iter()
                    .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len())),
            )
            .map(|len| len + 4)
            .sum();
        let mut out = Vec::with_capacity(size + 2);
        out.push(b'{');
        for (key, value) in &self.0 {
            match change(key) {
                None => write_member(&mut out, key, value.get()),
                Some((_, Some(new))) => write_member(&mut out, key, new),
                Some((_, None)) => {}
            }
        }
        for (i, (key, value)) in changes.iter().enumerate() {
            let last = !changes[i + 1..].iter().any(|(k, _)| k == key);
            if let (Some(value), true, false) = (value, last, self.0.contains_key(*key)) {
                write_member(&mut out, key, value);
            }
        }
        out.push(b'}');
        Bytes::from(out)
    }
}

/// A member changed on the way out: its key and new JSON text, or `None` to leave it out.
pub type Change<'a> = (&'a str, Option<Cow<'a, str>>);

/// Appends `"key":value` to an object being written, after a comma unless it is the first.
fn write_member(out: &mut Vec<u8>, key: &str, value: &str) {
    if out.len() > 1 {
        out.push(b',');
    }
    // Writing a string to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
    out.extend_from_slice(value.as_bytes());
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = RawObject;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut members = IndexMap::with_capacity(map.size_hint().unwrap_or(8).min(64));
                while let Some((key, value)) = map.next_entry::<String, Box<RawValue>>()? {
                    members.insert(key, value);
                }
                Ok(RawObject(members))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn members_are_read_rewritten_and_printed_in_order() {
        let text = br#"{"model": "a", "prompt": "caf\u00e9 \"x\"", "n": 2, "model": "b", "nested": {"k": [1, 2.5, null]}}"#;
        let object = serde_json::from_slice::<RawObject>(text).unwrap();
        assert_eq!(object.get_as::<String>("model").as_deref(), Some("b"));
        assert_eq!(object.get_as::<i64>("n"), Some(2));
        assert_eq!(object.get_as::<bool>("n"), None);
        assert_eq!(object.get_as::<i64>("absent"), None);
        let changes: [Change; 4] = [
            ("n", Some("1".into())),
            ("stream", Some("true".into())),
            ("nested", None),
            ("absent", None),
        ];
        let printed: Value = serde_json::from_slice(&object.to_bytes_with(&changes)).unwrap();
        assert_eq!(
            printed,
            json!({"model": "b", "prompt": "café \"x\"", "n": 1, "stream": true})
        );
        let keys: Vec<_> = printed.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["model", "prompt", "n", "stream"]);
    }

    #[test]
    fn only_objects_parse() {
        for bad in [
            &b"[1]"[..],
            b"\"x\"",
            b"{\"a\": }",
            b"{\"a\": 1} trailing",
            b"",
        ] {
            assert!(serde_json::from_slice::<RawObject>(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            &serde_json::from_slice::<RawObject>(b"{}")
                .unwrap()
                .to_bytes_with(&[("a", Some("1".into())), ("a", Some("2".into()))])[..],
            b"{\"a\":2}"
        );
    }
}
