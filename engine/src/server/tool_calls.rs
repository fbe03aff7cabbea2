//! Tool calls read from a chat answer's text, as vLLM's `hermes` tool-call parser reads them
//! (`--enable-auto-tool-choice --tool-call-parser hermes`): the models whose chat templates ask
//! for `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen2.5, Qwen3, Hermes 2 and
//! 3, and others). A call is read once its closing tag arrives, or as it stands when the answer
//! ends inside it; text outside the tags is the answer's content. A call whose JSON names no
//! function stays text, so nothing the model wrote is lost.
//!
//! [`ToolCalls`] reads an answer as it streams: text that could be the start of an opening tag
//! is held back until the next text says whether it is, and a call is sent whole, in one chunk.

use switchyard_protocol::openai::{FunctionCall, ToolCall, ToolCallChunk};

/// The tool-call formats the engine reads (`--tool-call-parser`, vLLM's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolCallParser {
    /// `<tool_call>{"name": ..., "arguments": ...}</tool_call>`.
    Hermes,
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// What a piece of an answer's text amounts to.
#[derive(Debug, Default, PartialEq)]
pub struct Read {
    /// Text outside any call.
    pub content: String,
    /// Calls completed in it, numbered within the answer.
    pub calls: Vec<ToolCallChunk>,
}

/// One answer's reading, as its text arrives.
#[derive(Debug)]
pub struct ToolCalls {
    /// Prefix of the calls' ids (the request's and the choice's, so ids are unique).
    id_prefix: String,
    /// Text not read yet: the inside of an open call, or what may begin an opening tag.
    pending: String,
    /// Whether an opening tag was read and its closing one not yet.
    inside: bool,
    /// Calls read so far.
    calls: u32,
}

impl ToolCalls {
    /// A reading of choice `choice` of request `request_id`.
    pub fn new(request_id: &str, choice: u32) -> Self {
        ToolCalls {
            id_prefix: format!("chatcmpl-tool-{request_id}-{choice}"),
            pending: String::new(),
            inside: false,
            calls: 0,
        }
    }

    /// Whether any call was read.
    pub fn called(&self) -> bool {
        self.calls > 0
    }

    /// Reads the next `text` of the answer.
    pub fn push(&mut self, text: &str) -> Read {
        self.pending.push_str(text);
        let mut read = Read::default();
        loop {
            if self.inside {
                let Some(end) = self.pending.find(CLOSE) else {
                    break;
                };
                let body: String = self.pending.drain(..end + CLOSE.len()).collect();
                self.inside = false;
                self.take_call(&body[..end], true, &mut read);
            } else if let Some(start) = self.pending.find(OPEN) {
                read.content.extend(self.pending.drain(..start));
                self.pending.drain(..OPEN.len());
                self.inside = true;
            } else {
                let held = held_back(&self.pending);
                let sure = self.pending.len() - held;
                read.content.extend(self.pending.drain(..sure));
                break;
            }
        }
        read
    }

    /// Reads what is left once the answer ended: a call left open is read as it stands.
    pub fn finish(&mut self) -> Read {
        let mut read = Read::default();
        let rest = std::mem::take(&mut self.pending);
        if std::mem::take(&mut self.inside) {
            self.take_call(&rest, false, &mut read);
        } else {
            read.content = rest;
        }
        read
    }

    /// Reads one call's `body` (closed by its tag or not) into `read`, or keeps it as text.
    fn take_call(&mut self, body: &str, closed: bool, read: &mut Read) {
        match function_call(body) {
            Some(function) => {
                read.calls.push(ToolCallChunk {
                    index: self.calls,
                    call: ToolCall {
                        id: format!("{}-{}", self.id_prefix, self.calls),
                        kind: "function".into(),
                        function,
                    },
                });
                self.calls += 1;
            }
            None => {
                read.content.push_str(OPEN);
                read.content.push_str(body);
                if closed {
                    read.content.push_str(CLOSE);
                }
            }
        }
    }
}

/// Reads the next `text` of an answer with `reading` (as it is without one), and what is left
/// once `last` says the answer ended.
pub fn read_next(reading: Option<&mut ToolCalls>, text: String, last: bool) -> Read {
    let Some(reading) = reading else {
        return Read {
            content: text,
            calls: Vec::new(),
        };
    };
    let mut read = reading.push(&text);
    if last {
        let rest = reading.finish();
        read.content.push_str(&rest.content);
        read.calls.extend(rest.calls);
    }
    read
}

/// Reads a whole answer: its content (none when only calls and white space are left) and calls.
pub fn read_whole(request_id: &str, choice: u32, text: &str) -> (Option<String>, Vec<ToolCall>) {
    let mut reading = ToolCalls::new(request_id, choice);
    let read = read_next(Some(&mut reading), text.to_string(), true);
    let content = match reading.called() && read.content.trim().is_empty() {
        true => None,
        false => Some(read.content),
    };
    (content, read.calls.into_iter().map(|c| c.call).collect())
}

/// The function a call's JSON names, with its arguments as JSON text (`{}` when it has none).
fn function_call(body: &str) -> Option<FunctionCall> {
    let value: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = match value.get("arguments") {
        None | Some(serde_json::Value::Null) => "{}".to_string(),
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    };
    Some(FunctionCall { name, arguments })
}

/// How many bytes at the end of `text` could begin an opening tag.
fn held_back(text: &str) -> usize {
    (1..OPEN.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && OPEN.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(pieces: &[&str]) -> (String, Vec<ToolCallChunk>) {
        let mut reading = ToolCalls::new("r", 0);
        let (mut content, mut calls) = (String::new(), Vec::new());
        for piece in pieces {
            let read = reading.push(piece);
            content.push_str(&read.content);
            calls.extend(read.calls);
        }
        let rest = reading.finish();
        content.push_str(&rest.content);
        calls.extend(rest.calls);
        (content, calls)
    }

    #[test]
    fn a_whole_answer_splits_into_its_text_and_its_calls() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \
                    \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"time\"}</tool_call>";
        let (content, calls) = read_whole("req", 1, text);
        assert_eq!(content.as_deref(), Some("Let me look.\n\n"));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].id, "chatcmpl-tool-req-1-0");
        assert_eq!(calls[0].kind, "function");
        assert_eq!(calls[0].function.name, "weather");
        assert_eq!(calls[0].function.arguments, r#"{"city":"Paris"}"#);
        assert_eq!(calls[1].function.arguments, "{}");
        // Only calls: no content.
        let (content, calls) = read_whole("req", 0, "<tool_call>{\"name\": \"a\"}</tool_call>\n");
        assert_eq!((content, calls.len()), (None, 1));
        // No call: all text, as it was.
        let (content, calls) = read_whole("req", 0, "a < b, and <tool");
        assert_eq!(
            (content.as_deref(), calls.len()),
            (Some("a < b, and <tool"), 0)
        );
    }

    #[test]
    fn a_call_left_open_is_read_as_it_stands_and_one_naming_nothing_stays_text() {
        let (content, calls) = read_whole(
            "r",
            0,
            "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}",
        );
        assert_eq!(
            (content, calls[0].function.arguments.as_str()),
            (None, r#"{"x": 1}"#)
        );
        let broken = "<tool_call>{\"name\": 3}</tool_call> and <tool_call>not json";
        let (content, calls) = read_whole("r", 0, broken);
        assert_eq!((content.as_deref(), calls.len()), (Some(broken), 0));
    }

    #[test]
    fn a_stream_holds_back_only_what_could_open_a_call_and_sends_each_call_whole() {
        let (content, calls) = streamed(&[
            "Sure",
            " <",
            "tool",
            "_call>{\"name\": \"f\", \"argu",
            "ments\": {\"q\": \"é\"}}</tool_",
            "call> then <b>",
        ]);
        assert_eq!(content, "Sure  then <b>");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].index, 0);
        assert_eq!(calls[0].call.function.arguments, r#"{"q":"é"}"#);
        // Each push sends what is sure at once.
        let mut reading = ToolCalls::new("r", 0);
        assert_eq!(reading.push("a <to").content, "a ");
        assert_eq!(reading.push("ast>").content, "<toast>");
        assert_eq!(reading.push("é<").content, "é");
        assert_eq!(reading.finish().content, "<");
        assert!(!reading.called());
    }
}
