//! A JSON object whose member values stay as the client wrote them. The gateway reads a few
//! members of a request and rewrites a few more before forwarding it; building a value tree of
//! the rest (a long prompt, a conversation) only to print it again would cost more than the
//! forwarding itself.

use bytes::Bytes;
use indexmap::IndexMap;
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

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

    /// Sets member `key` to `value`, in its place when it is there, else at the end. The values
    /// the gateway sets (numbers, strings, token ids, objects of those) always serialize.
    pub fn set(&mut self, key: &str, value: &impl Serialize) {
        if let Ok(raw) = serde_json::value::to_raw_value(value) {
            self.0.insert(key.to_string(), raw);
        }
    }

    /// Removes member `key` and returns its raw value, keeping the others in order.
    pub fn remove(&mut self, key: &str) -> Option<Box<RawValue>> {
        self.0.shift_remove(key)
    }

    /// The object as compact JSON text; values are copied as they came.
    pub fn to_bytes(&self) -> Bytes {
        let size: usize = self
            .0
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum();
        let mut out = Vec::with_capacity(size + 2);
        out.push(b'{');
        for (i, (key, value)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // Writing a string to a Vec cannot fail.
            let _ = serde_json::to_writer(&mut out, key);
            out.push(b':');
            out.extend_from_slice(value.get().as_bytes());
        }
        out.push(b'}');
        Bytes::from(out)
    }
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
        let mut object = serde_json::from_slice::<RawObject>(text).unwrap();
        assert_eq!(object.get_as::<String>("model").as_deref(), Some("b"));
        assert_eq!(object.get_as::<i64>("n"), Some(2));
        assert_eq!(object.get_as::<bool>("n"), None);
        assert_eq!(object.get_as::<i64>("absent"), None);
        object.set("n", &1);
        object.set("stream", &true);
        assert!(object.remove("nested").is_some());
        let printed: Value = serde_json::from_slice(&object.to_bytes()).unwrap();
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
                .to_bytes()[..],
            b"{}"
        );
    }
}
