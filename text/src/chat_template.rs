//! Chat templates: Jinja templates from Hugging Face tokenizer configs, rendered with minijinja
//! and the helpers real templates call (`raise_exception`, `tojson`, `strftime_now`).

use minijinja::value::Kwargs;
use minijinja::{Environment, Error, ErrorKind, Value};
use serde::Serialize;
use switchyard_protocol::model_description::TemplateSource;

/// The built-in model's template (ChatML, as Qwen models use).
pub const CHATML_TEMPLATE: &str = "{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}";

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// What it was compiled from, for handing it on (a gateway learning an engine's model).
    source: TemplateSource,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChatTemplate")
    }
}

/// One message as templates see it: content already flattened to text.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TemplateMessage {
    /// `system`, `user`, `assistant`, `tool`.
    pub role: String,
    /// The text.
    pub content: String,
    /// Tool calls of an assistant message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// The call a tool message answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Participant name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// What a template is rendered with.
#[derive(Debug, Clone, Default)]
pub struct TemplateInput<'a> {
    /// The conversation.
    pub messages: &'a [TemplateMessage],
    /// Open the assistant's turn at the end.
    pub add_generation_prompt: bool,
    /// Tool definitions, if any.
    pub tools: Option<&'a serde_json::Value>,
    /// Further variables (`chat_template_kwargs`, special tokens).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ChatTemplate {
    /// Compiles `source`; fails with the template's syntax error.
    pub fn new(source: &str) -> Result<Self, Error> {
        Self::with_special_tokens(source, None, None)
    }

    /// Compiles `source` with the `bos_token` and `eos_token` variables templates refer to.
    pub fn with_special_tokens(
        source: &str,
        bos: Option<String>,
        eos: Option<String>,
    ) -> Result<Self, Error> {
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |format: String| -> String {
            chrono::Local::now().format(&format).to_string()
        });
        env.add_filter("tojson", python_tojson);
        env.add_global("bos_token", bos.clone().unwrap_or_default());
        env.add_global("eos_token", eos.clone().unwrap_or_default());
        env.add_template_owned("chat", source.to_string())?;
        Ok(ChatTemplate {
            env,
            source: TemplateSource {
                source: source.to_string(),
                bos_token: bos,
                eos_token: eos,
            },
        })
    }

    /// Compiles a template handed on by [`ChatTemplate::source`].
    pub fn from_source(source: &TemplateSource) -> Result<Self, Error> {
        Self::with_special_tokens(
            &source.source,
            source.bos_token.clone(),
            source.eos_token.clone(),
        )
    }

    /// The source and special tokens this template was compiled from.
    pub fn source(&self) -> &TemplateSource {
        &self.source
    }

    /// The prompt text for a conversation.
    pub fn render(&self, input: &TemplateInput<'_>) -> Result<String, Error> {
        let mut ctx = input.extra.clone();
        ctx.insert(
            "messages".into(),
            serde_json::to_value(input.messages).unwrap_or_default(),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            input.add_generation_prompt.into(),
        );
        if let Some(tools) = input.tools {
            ctx.insert("tools".into(), tools.clone());
        }
        self.env
            .get_template("chat")?
            .render(Value::from_serialize(&ctx))
    }
}

/// `tojson` as transformers defines it: Python's `json.dumps` with `ensure_ascii=False`, keys in
/// their given order, `", "` and `": "` separators, or `indent` spaces per level.
fn python_tojson(value: Value, indent: Option<usize>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match kwargs.get::<Option<usize>>("indent")? {
        Some(n) => Some(n),
        None => indent,
    };
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let result = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let mut ser = serde_json::Serializer::with_formatter(
                &mut out,
                serde_json::ser::PrettyFormatter::with_indent(&pad),
            );
            serde::Serialize::serialize(&value, &mut ser)
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonCompact);
            serde::Serialize::serialize(&value, &mut ser)
        }
    };
    result.map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    Ok(Value::from_safe_string(
        String::from_utf8(out).unwrap_or_default(),
    ))
}

/// Python's default `json.dumps` separators: `", "` between items, `": "` after keys.
struct PythonCompact;

impl serde_json::ser::Formatter for PythonCompact {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: &str) -> TemplateMessage {
        TemplateMessage {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }

    #[test]
    fn a_template_handed_on_by_its_source_renders_the_same() {
        let source =
            "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}";
        let original =
            ChatTemplate::with_special_tokens(source, Some("<s>".into()), Some("</s>".into()))
                .unwrap();
        let copy = ChatTemplate::from_source(original.source()).unwrap();
        let messages = [msg("user", "hi"), msg("assistant", "yo")];
        let input = TemplateInput {
            messages: &messages,
            ..Default::default()
        };
        assert_eq!(copy.render(&input).unwrap(), "<s>hi</s>yo</s>");
        assert_eq!(
            copy.render(&input).unwrap(),
            original.render(&input).unwrap()
        );
    }

    #[test]
    fn chatml_renders() {
        let t = ChatTemplate::new(CHATML_TEMPLATE).unwrap();
        let messages = [msg("system", "Be brief."), msg("user", "Hi")];
        let out = t
            .render(&TemplateInput {
                messages: &messages,
                add_generation_prompt: true,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn raise_exception_and_python_methods_work() {
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}{{ messages[0].content.strip() | tojson }}",
        )
        .unwrap();
        let ok = t
            .render(&TemplateInput {
                messages: &[msg("user", " hi ")],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(ok, "\"hi\"");
        let json = ChatTemplate::new(
            "{{ {'b': [1, 'x<'], 'a': none} | tojson }}|{{ [1] | tojson(indent=2) }}",
        )
        .unwrap()
        .render(&TemplateInput::default())
        .unwrap();
        assert_eq!(json, "{\"b\": [1, \"x<\"], \"a\": null}|[\n  1\n]");
        let err = t
            .render(&TemplateInput {
                messages: &[msg("system", "x")],
                ..Default::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("first must be user"));
    }
}
