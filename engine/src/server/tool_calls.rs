//! Tool calls read from a chat answer's text, as vLLM's tool-call parsers of the same names read
//! them (`--enable-auto-tool-choice --tool-call-parser NAME`):
//!
//! - `hermes`: the models whose chat templates ask for `<tool_call>{"name": ..., "arguments":
//!   {...}}</tool_call>` (Qwen2.5, Qwen3, Hermes 2 and 3, and others). A call is read once its
//!   closing tag arrives, or as it stands when the answer ends inside it; text outside the tags
//!   is the answer's content. Text that could be the start of an opening tag is held back until
//!   the next text says whether it is.
//! - `llama3_json`: Llama 3.1, 3.2 and 3.3, whose answer is either text or, from its start,
//!   calls as JSON objects (`{"name": ..., "parameters": {...}}`, several separated by `;`,
//!   after `<|python_tag|>` where special tokens are kept). Each is read once its object closes.
//!
//! A call whose JSON names no function stays text, so nothing the model wrote is lost, and each
//! call is sent whole, in one chunk.

use switchyard_protocol::openai::{ChatCompletionRequest, FunctionCall, ToolCall, ToolCallChunk};

/// The tool-call formats the engine reads (`--tool-call-parser`, vLLM's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolCallParser {
    /// `<tool_call>{"name": ..., "arguments": ...}</tool_call>`.
    Hermes,
    /// `{"name": ..., "parameters": ...}; {...}` from the answer's start (Llama 3.x).
    #[value(name = "llama3_json")]
    Llama3Json,
}

/// What Llama 3.x writes before its calls when special tokens are kept in the text.
const PYTHON_TAG: &str = "<|python_tag|>";

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
    /// Text not read yet: the inside of an open call, or what may begin one.
    pending: String,
    /// Where the reading is.
    state: State,
    /// Calls read so far.
    calls: u32,
    /// Whether only the first call is kept (`parallel_tool_calls: false`); later ones are
    /// dropped, as vLLM drops them.
    one_call: bool,
}

/// Where a reading is, by format.
#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// `hermes`: inside a call (an opening tag read, its closing one not yet) or not.
    Hermes { inside: bool },
    /// `llama3_json`: before the answer's first text says what it is ...
    Undecided,
    /// ... calls (JSON objects) ...
    Calls,
    /// ... or text, from there on.
    Text,
}

impl ToolCalls {
    /// A reading, in `format`, of choice `choice` of request `request_id`.
    pub fn new(format: ToolCallParser, request_id: &str, choice: u32) -> Self {
        let state = match format {
            ToolCallParser::Hermes => State::Hermes { inside: false },
            ToolCallParser::Llama3Json => State::Undecided,
        };
        ToolCalls {
            id_prefix: format!("chatcmpl-tool-{request_id}-{choice}"),
            pending: String::new(),
            state,
            calls: 0,
            one_call: false,
        }
    }

    /// The same reading, keeping only the answer's first call when `one_call`.
    pub fn first_call_only(mut self, one_call: bool) -> Self {
        self.one_call = one_call;
        self
    }

    /// Whether any call was read.
    pub fn called(&self) -> bool {
        self.calls > 0
    }

    /// Reads the next `text` of the answer.
    pub fn push(&mut self, text: &str) -> Read {
        self.pending.push_str(text);
        let mut read = Read::default();
        match self.state {
            State::Hermes { .. } => self.read_tags(&mut read),
            _ => self.read_objects(&mut read, false),
        }
        read
    }

    /// Reads what is left once the answer ended: a call left open is read as it stands
    /// (`hermes`) or kept as text (`llama3_json`).
    pub fn finish(&mut self) -> Read {
        let mut read = Read::default();
        match self.state {
            State::Hermes { inside } => {
                self.state = State::Hermes { inside: false };
                let rest = std::mem::take(&mut self.pending);
                match inside {
                    true => self.take_call(&rest, false, &mut read),
                    false => read.content = rest,
                }
            }
            _ => self.read_objects(&mut read, true),
        }
        read
    }

    /// `hermes`: reads the pending text's calls between their tags, holding back what may
    /// begin an opening tag.
    fn read_tags(&mut self, read: &mut Read) {
        loop {
            if self.state == (State::Hermes { inside: true }) {
                let Some(end) = self.pending.find(CLOSE) else {
                    break;
                };
                let body: String = self.pending.drain(..end + CLOSE.len()).collect();
                self.state = State::Hermes { inside: false };
                self.take_call(&body[..end], true, read);
            } else if let Some(start) = self.pending.find(OPEN) {
                read.content.extend(self.pending.drain(..start));
                self.pending.drain(..OPEN.len());
                self.state = State::Hermes { inside: true };
            } else {
                let held = held_back(&self.pending);
                let sure = self.pending.len() - held;
                read.content.extend(self.pending.drain(..sure));
                break;
            }
        }
    }

    /// `llama3_json`: decides from the answer's first text whether it is calls, then reads
    /// each JSON object as it closes (once the answer `ended`, what is left is text).
    fn read_objects(&mut self, read: &mut Read, ended: bool) {
        if self.state == State::Undecided {
            let start = self.pending.trim_start();
            if let Some(after) = start.strip_prefix(PYTHON_TAG) {
                self.pending = after.to_string();
                self.state = State::Calls;
            } else if start.starts_with('{') {
                self.state = State::Calls;
            } else if !ended && (start.is_empty() || PYTHON_TAG.starts_with(start)) {
                return;
            } else {
                self.state = State::Text;
            }
        }
        while self.state == State::Calls {
            let rest = self
                .pending
                .trim_start_matches(|c: char| c.is_whitespace() || c == ';');
            let skipped = self.pending.len() - rest.len();
            if rest.is_empty() {
                break;
            }
            if !rest.starts_with('{') {
                self.state = State::Text;
                break;
            }
            let mut values =
                serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Value>();
            match values.next() {
                Some(Ok(value)) => {
                    let end = skipped + values.byte_offset();
                    let body: String = self.pending.drain(..end).collect();
                    match call_of(&value) {
                        Some(function) => self.push_call(function, read),
                        None => {
                            read.content.push_str(
                                body.trim_start_matches(|c: char| c.is_whitespace() || c == ';'),
                            );
                            self.state = State::Text;
                        }
                    }
                }
                Some(Err(e)) if e.is_eof() && !ended => break,
                _ => self.state = State::Text,
            }
        }
        if self.state == State::Text || ended {
            read.content.push_str(&std::mem::take(&mut self.pending));
        }
    }

    /// Reads one call's `body` (closed by its tag or not) into `read`, or keeps it as text.
    fn take_call(&mut self, body: &str, closed: bool, read: &mut Read) {
        let function = serde_json::from_str::<serde_json::Value>(body.trim())
            .ok()
            .and_then(|v| call_of(&v));
        match function {
            Some(function) => self.push_call(function, read),
            None => {
                read.content.push_str(OPEN);
                read.content.push_str(body);
                if closed {
                    read.content.push_str(CLOSE);
                }
            }
        }
    }

    /// Adds a call of `function` to `read`, numbered within the answer (none past the first
    /// when only one is kept).
    fn push_call(&mut self, function: FunctionCall, read: &mut Read) {
        if self.one_call && self.calls > 0 {
            return;
        }
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
}

/// A reading, in `format`, of choice `choice` of request `request_id`, which asks for `chat`:
/// its first call only where `parallel_tool_calls` is false.
pub fn reading_of(
    format: ToolCallParser,
    chat: &ChatCompletionRequest,
    request_id: &str,
    choice: u32,
) -> ToolCalls {
    ToolCalls::new(format, request_id, choice)
        .first_call_only(chat.parallel_tool_calls == Some(false))
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

/// Reads a whole answer with a fresh `reading`: its content (none when only calls and white
/// space are left) and calls.
pub fn read_whole(reading: ToolCalls, text: &str) -> (Option<String>, Vec<ToolCall>) {
    let mut reading = reading;
    let read = read_next(Some(&mut reading), text.to_string(), true);
    let content = match reading.called() && read.content.trim().is_empty() {
        true => None,
        false => Some(read.content),
    };
    (content, read.calls.into_iter().map(|c| c.call).collect())
}

/// The function a call's JSON names, with its arguments (`arguments`, or Llama's
/// `parameters`) as JSON text (`{}` when it has none).
fn call_of(value: &serde_json::Value) -> Option<FunctionCall> {
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = match value.get("arguments").or_else(|| value.get("parameters")) {
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

    const HERMES: ToolCallParser = ToolCallParser::Hermes;
    const LLAMA: ToolCallParser = ToolCallParser::Llama3Json;

    fn streamed(format: ToolCallParser, pieces: &[&str]) -> (String, Vec<ToolCallChunk>) {
        let mut reading = ToolCalls::new(format, "r", 0);
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
        let (content, calls) = read_whole(ToolCalls::new(HERMES, "req", 1), text);
        assert_eq!(content.as_deref(), Some("Let me look.\n\n"));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].id, "chatcmpl-tool-req-1-0");
        assert_eq!(calls[0].kind, "function");
        assert_eq!(calls[0].function.name, "weather");
        assert_eq!(calls[0].function.arguments, r#"{"city":"Paris"}"#);
        assert_eq!(calls[1].function.arguments, "{}");
        // Only calls: no content.
        let (content, calls) = read_whole(
            ToolCalls::new(HERMES, "req", 0),
            "<tool_call>{\"name\": \"a\"}</tool_call>\n",
        );
        assert_eq!((content, calls.len()), (None, 1));
        // No call: all text, as it was.
        let (content, calls) = read_whole(ToolCalls::new(HERMES, "req", 0), "a < b, and <tool");
        assert_eq!(
            (content.as_deref(), calls.len()),
            (Some("a < b, and <tool"), 0)
        );
    }

    #[test]
    fn a_call_left_open_is_read_as_it_stands_and_one_naming_nothing_stays_text() {
        let (content, calls) = read_whole(
            ToolCalls::new(HERMES, "r", 0),
            "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}",
        );
        assert_eq!(
            (content, calls[0].function.arguments.as_str()),
            (None, r#"{"x": 1}"#)
        );
        let broken = "<tool_call>{\"name\": 3}</tool_call> and <tool_call>not json";
        let (content, calls) = read_whole(ToolCalls::new(HERMES, "r", 0), broken);
        assert_eq!((content.as_deref(), calls.len()), (Some(broken), 0));
    }

    #[test]
    fn a_stream_holds_back_only_what_could_open_a_call_and_sends_each_call_whole() {
        let (content, calls) = streamed(
            HERMES,
            &[
                "Sure",
                " <",
                "tool",
                "_call>{\"name\": \"f\", \"argu",
                "ments\": {\"q\": \"é\"}}</tool_",
                "call> then <b>",
            ],
        );
        assert_eq!(content, "Sure  then <b>");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].index, 0);
        assert_eq!(calls[0].call.function.arguments, r#"{"q":"é"}"#);
        // Each push sends what is sure at once.
        let mut reading = ToolCalls::new(HERMES, "r", 0);
        assert_eq!(reading.push("a <to").content, "a ");
        assert_eq!(reading.push("ast>").content, "<toast>");
        assert_eq!(reading.push("é<").content, "é");
        assert_eq!(reading.finish().content, "<");
        assert!(!reading.called());
    }

    #[test]
    fn llama_answers_are_calls_from_their_start_or_text() {
        let text = "{\"name\": \"weather\", \"parameters\": {\"city\": \"Paris\"}}; \
                    {\"name\": \"time\", \"parameters\": {}}";
        let (content, calls) = read_whole(ToolCalls::new(LLAMA, "r", 0), text);
        assert_eq!(content, None);
        let names: Vec<&str> = calls.iter().map(|c| c.function.name.as_str()).collect();
        assert_eq!(names, ["weather", "time"]);
        assert_eq!(calls[0].function.arguments, r#"{"city":"Paris"}"#);
        // After the python tag, where special tokens are kept.
        let (_, calls) = read_whole(
            ToolCalls::new(LLAMA, "r", 0),
            "<|python_tag|>{\"name\": \"f\"}",
        );
        assert_eq!(calls[0].function.arguments, "{}");
        // Text, even with an object later in it, is text; so is an object naming nothing, and
        // one left open.
        for text in [
            "It is {\"name\": \"f\"}",
            "{\"city\": \"Paris\"}",
            "{\"name\": \"f\", \"par",
        ] {
            let (content, calls) = read_whole(ToolCalls::new(LLAMA, "r", 0), text);
            assert_eq!((content.as_deref(), calls.len()), (Some(text), 0), "{text}");
        }
        // Text after the calls stays text.
        let (content, calls) = read_whole(ToolCalls::new(LLAMA, "r", 0), "{\"name\": \"f\"} Done.");
        assert_eq!((content.as_deref(), calls.len()), (Some(" Done."), 1));
    }

    #[test]
    fn a_llama_stream_sends_each_call_as_its_object_closes_and_text_at_once() {
        let mut reading = ToolCalls::new(LLAMA, "r", 0);
        assert_eq!(reading.push("  ").content, "");
        assert_eq!(reading.push("{\"name\": \"f\", ").calls.len(), 0);
        let read = reading.push("\"parameters\": {\"q\": \"é\"}};");
        assert_eq!(read.calls[0].call.function.arguments, r#"{"q":"é"}"#);
        let read = reading.push(" {\"name\": \"g\"}");
        assert_eq!(read.calls[0].index, 1);
        assert_eq!(reading.finish(), Read::default());
        let (content, calls) = streamed(LLAMA, &["<|py", "thon_tag|>", "{\"name\":", "\"h\"}"]);
        assert_eq!((content.as_str(), calls.len()), ("", 1));
        let (content, calls) = streamed(LLAMA, &["Hel", "lo {"]);
        assert_eq!((content.as_str(), calls.len()), ("Hello {", 0));
        let mut text = ToolCalls::new(LLAMA, "r", 0);
        assert_eq!(text.push("Hi").content, "Hi", "text goes out at once");
    }

    #[test]
    fn only_the_first_call_is_kept_when_one_is_asked_for() {
        let two =
            "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>";
        let (_, calls) = read_whole(ToolCalls::new(HERMES, "r", 0).first_call_only(true), two);
        let names: Vec<&str> = calls.iter().map(|c| c.function.name.as_str()).collect();
        assert_eq!(names, ["a"]);
        let (_, calls) = read_whole(ToolCalls::new(HERMES, "r", 0), two);
        assert_eq!(calls.len(), 2);
    }
}
