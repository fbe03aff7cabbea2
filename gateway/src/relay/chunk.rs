//! Reading one streamed chunk (completions or chat), once. The relay reads what it watches:
//! each choice's news and finish reason, and the usage. A chunk read for assembly into one JSON
//! answer also keeps, as raw JSON, everything else it carries (its id and model, the whole
//! usage, log-probabilities, tool calls, fields the gateway does not know).

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// Top-level fields an assembled answer takes from the first chunk that has them.
const HEAD_FIELDS: [&str; 4] = ["id", "created", "model", "system_fingerprint"];

/// What the gateway read of one chunk.
#[derive(Debug, Default)]
pub struct ChunkView {
    /// The choices' news.
    pub choices: Vec<ChoiceView>,
    /// Usage, on the last chunk (or every chunk with continuous usage stats).
    pub usage: Option<UsageView>,
    /// Kept for assembly: the head fields present, as sent.
    pub head: Vec<(&'static str, Box<RawValue>)>,
    /// Kept for assembly: the usage as sent.
    pub raw_usage: Option<Box<RawValue>>,
    /// Kept for assembly: an error the upstream sent in place of a chunk.
    pub error: Option<Box<RawValue>>,
}

/// One choice's news in a chunk.
#[derive(Debug, Default)]
pub struct ChoiceView {
    /// The choice's index.
    pub index: u32,
    /// New text (completions).
    pub text: Option<String>,
    /// New message content (chat).
    pub delta: Option<DeltaView>,
    /// Set when the choice ended.
    pub finish_reason: Option<String>,
    /// Kept for assembly: the choice's other fields that are not `null`.
    pub extra: Vec<(String, Box<RawValue>)>,
}

/// A chat delta.
#[derive(Debug, Default)]
pub struct DeltaView {
    /// New content.
    pub content: Option<String>,
    /// Kept for assembly: the role.
    pub role: Option<String>,
    /// Whether it carries generated tokens other than content: tool calls or reasoning.
    pub other_news: bool,
    /// Kept for assembly: the delta's other fields (tool calls, reasoning) that are not `null`.
    pub extra: Vec<(String, Box<RawValue>)>,
}

/// The delta fields besides `content` that carry generated tokens (vLLM's and SGLang's).
const OTHER_NEWS: [&str; 3] = ["tool_calls", "reasoning_content", "reasoning"];

/// Token counts of a chunk's usage.
#[derive(Debug, Default, Deserialize)]
pub struct UsageView {
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub completion_tokens: u64,
}

impl ChunkView {
    /// Reads what the relay watches of a chunk; `None` if it is not a chunk.
    pub fn parse(data: &[u8]) -> Option<ChunkView> {
        Self::read(data, false, HeadKept::default())
    }

    /// Reads a chunk keeping everything its assembly needs but the head fields it `kept`
    /// already; `None` if it is not a chunk.
    pub fn parse_for_assembly(data: &[u8], kept: HeadKept) -> Option<ChunkView> {
        Self::read(data, true, kept)
    }

    fn read(data: &[u8], keep: bool, kept: HeadKept) -> Option<ChunkView> {
        // Checked whole once, the chunk's strings are not checked again one by one.
        let text = std::str::from_utf8(data).ok()?;
        let mut de = serde_json::Deserializer::from_str(text);
        let view = Keep(keep, Kind::Chunk(kept)).deserialize(&mut de).ok()?;
        de.end().ok()?;
        match view {
            Read::Chunk(view) => Some(view),
            _ => None,
        }
    }

    /// Whether the chunk carries generated tokens: text, tool calls or reasoning.
    pub fn has_text(&self) -> bool {
        self.choices
            .iter()
            .any(|c| !c.new_text().is_empty() || c.delta.as_ref().is_some_and(|d| d.other_news))
    }

    /// Whether this is the usage-only last chunk of `include_usage`.
    pub fn is_usage_only(&self) -> bool {
        self.choices.is_empty() && self.usage.is_some()
    }
}

impl ChoiceView {
    /// The new text of the choice, in either layout.
    pub fn new_text(&self) -> &str {
        self.text
            .as_deref()
            .or_else(|| self.delta.as_ref().and_then(|d| d.content.as_deref()))
            .unwrap_or_default()
    }
}

/// The head fields an assembly has already kept, which later chunks need not keep again.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadKept(u8);

impl HeadKept {
    /// Notes the head fields `view` kept.
    pub fn add(&mut self, view: &ChunkView) {
        for (name, _) in &view.head {
            if let Some(i) = HEAD_FIELDS.iter().position(|f| f == name) {
                self.0 |= 1 << i;
            }
        }
    }

    fn has(self, field: usize) -> bool {
        self.0 & (1 << field) != 0
    }
}

/// Which object a [`Keep`] reads.
#[derive(Clone, Copy)]
enum Kind {
    /// A chunk, for an assembly that already kept these head fields.
    Chunk(HeadKept),
    Choice,
    Delta,
}

/// What a [`Keep`] read.
enum Read {
    Chunk(ChunkView),
    Choice(ChoiceView),
    Delta(DeltaView),
}

/// Reads an object of `Kind`, keeping what assembly needs when `.0` is set.
#[derive(Clone, Copy)]
struct Keep(bool, Kind);

impl<'de> DeserializeSeed<'de> for Keep {
    type Value = Read;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Read, D::Error> {
        d.deserialize_map(self)
    }
}

/// A field name, borrowed from the chunk when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The field's value as raw JSON, unless it is `null`.
fn raw_unless_null<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<Box<RawValue>>, A::Error> {
    map.next_value()
}

/// Reads field `key`'s value into `extra` as raw JSON when `keep` and it is not `null`; skips
/// it otherwise. Says whether it was not `null`.
fn other_field<'de, A: MapAccess<'de>>(
    map: &mut A,
    keep: bool,
    key: Cow<'de, str>,
    extra: &mut Vec<(String, Box<RawValue>)>,
) -> Result<bool, A::Error> {
    if !keep {
        return Ok(map.next_value::<Option<IgnoredAny>>()?.is_some());
    }
    let raw = raw_unless_null(map)?;
    let present = raw.is_some();
    if let Some(raw) = raw {
        extra.push((key.into_owned(), raw));
    }
    Ok(present)
}

/// Reads what its seed reads, or nothing for `null`.
struct OrNull<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for OrNull<S> {
    type Value = Option<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for OrNull<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}

/// Reads a list of choices.
struct Choices(bool);

impl<'de> DeserializeSeed<'de> for Choices {
    type Value = Vec<ChoiceView>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<ChoiceView>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Choices {
    type Value = Vec<ChoiceView>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of choices")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<ChoiceView>, A::Error> {
        let mut choices = Vec::new();
        while let Some(read) = seq.next_element_seed(Keep(self.0, Kind::Choice))? {
            if let Read::Choice(choice) = read {
                choices.push(choice);
            }
        }
        Ok(choices)
    }
}

impl<'de> Visitor<'de> for Keep {
    type Value = Read;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
        let Keep(keep, kind) = self;
        match kind {
            Kind::Chunk(kept) => {
                let mut chunk = ChunkView::default();
                while let Some(Key(key)) = map.next_key()? {
                    match key.as_ref() {
                        "choices" => {
                            chunk.choices = map
                                .next_value_seed(OrNull(Choices(keep)))?
                                .unwrap_or_default()
                        }
                        "usage" if keep => {
                            chunk.raw_usage = raw_unless_null(&mut map)?;
                            chunk.usage = match &chunk.raw_usage {
                                Some(raw) => Some(
                                    serde_json::from_str(raw.get()).map_err(de::Error::custom)?,
                                ),
                                None => None,
                            };
                        }
                        "usage" => chunk.usage = map.next_value()?,
                        "error" if keep => chunk.error = Some(map.next_value()?),
                        name => match HEAD_FIELDS
                            .iter()
                            .position(|f| *f == name)
                            .filter(|i| keep && !kept.has(*i))
                        {
                            Some(i) => {
                                if let Some(raw) = raw_unless_null(&mut map)? {
                                    chunk.head.push((HEAD_FIELDS[i], raw));
                                }
                            }
                            None => {
                                map.next_value::<IgnoredAny>()?;
                            }
                        },
                    }
                }
                Ok(Read::Chunk(chunk))
            }
            Kind::Choice => {
                let mut choice = ChoiceView::default();
                while let Some(Key(key)) = map.next_key()? {
                    match key.as_ref() {
                        "index" => choice.index = map.next_value()?,
                        "text" => choice.text = map.next_value()?,
                        "finish_reason" => choice.finish_reason = map.next_value()?,
                        "delta" => {
                            if let Some(Read::Delta(delta)) =
                                map.next_value_seed(OrNull(Keep(keep, Kind::Delta)))?
                            {
                                choice.delta = Some(delta);
                            }
                        }
                        _ => {
                            other_field(&mut map, keep, key, &mut choice.extra)?;
                        }
                    }
                }
                Ok(Read::Choice(choice))
            }
            Kind::Delta => {
                let mut delta = DeltaView::default();
                while let Some(Key(key)) = map.next_key()? {
                    match key.as_ref() {
                        "content" => delta.content = map.next_value()?,
                        "role" if keep => delta.role = map.next_value()?,
                        news if OTHER_NEWS.contains(&news) => {
                            delta.other_news |= other_field(&mut map, keep, key, &mut delta.extra)?;
                        }
                        _ => {
                            other_field(&mut map, keep, key, &mut delta.extra)?;
                        }
                    }
                }
                Ok(Read::Delta(delta))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_reads_news_and_assembly_keeps_the_rest() {
        let chunk = br#"{"id":"c1","object":"chat.completion.chunk","created":5,"model":"m","system_fingerprint":null,
            "choices":[{"index":1,"delta":{"role":"assistant","content":"Hi","tool_calls":[{"index":0}],"x":null},
            "logprobs":{"content":[]},"finish_reason":null,"stop_reason":null}],
            "usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#;
        let lean = ChunkView::parse(chunk).unwrap();
        let kept = ChunkView::parse_for_assembly(chunk, HeadKept::default()).unwrap();
        for view in [&lean, &kept] {
            assert_eq!(view.choices.len(), 1);
            assert_eq!(view.choices[0].index, 1);
            assert_eq!(view.choices[0].new_text(), "Hi");
            assert!(view.choices[0].finish_reason.is_none());
            assert_eq!(view.usage.as_ref().unwrap().completion_tokens, 2);
        }
        assert!(lean.head.is_empty() && lean.raw_usage.is_none());
        // A chunk of tool calls, or of reasoning, is news without content.
        for news in [
            &br#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c"}]}}]}"#[..],
            br#"{"choices":[{"index":0,"delta":{"reasoning_content":"hmm","content":null}}]}"#,
        ] {
            assert!(ChunkView::parse(news).unwrap().has_text());
        }
        let quiet = br#"{"choices":[{"index":0,"delta":{"tool_calls":null,"content":""}}]}"#;
        assert!(!ChunkView::parse(quiet).unwrap().has_text());
        assert!(lean.choices[0].extra.is_empty());
        let heads: Vec<(&str, &str)> = kept.head.iter().map(|(k, v)| (*k, v.get())).collect();
        assert_eq!(
            heads,
            [("id", "\"c1\""), ("created", "5"), ("model", "\"m\"")]
        );
        let extra: Vec<&str> = kept.choices[0]
            .extra
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(extra, ["logprobs"]);
        let delta = kept.choices[0].delta.as_ref().unwrap();
        assert_eq!(delta.role.as_deref(), Some("assistant"));
        assert_eq!(delta.extra.len(), 1);
        assert!(kept.raw_usage.is_some());
        let mut head = HeadKept::default();
        head.add(&kept);
        let again = ChunkView::parse_for_assembly(chunk, head).unwrap();
        assert!(again.head.is_empty() && again.raw_usage.is_some());
        let error = ChunkView::parse_for_assembly(br#"{"error":{"message":"boom"}}"#, head);
        let error = error.unwrap();
        assert!(error.error.is_some() && error.choices.is_empty());
        for bad in [
            &b"[1]"[..],
            b"{\"choices\":7}",
            b"{} x",
            b"{\"choices\":[{\"index\":-1}]}",
        ] {
            assert!(ChunkView::parse(bad).is_none());
            assert!(ChunkView::parse_for_assembly(bad, HeadKept::default()).is_none());
        }
        assert!(ChunkView::parse(br#"{"choices":null,"usage":null}"#).is_some());
    }
}
