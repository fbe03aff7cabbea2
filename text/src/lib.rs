//! switchyard-text: turning text into token ids and back, and conversations into prompts. Engines
//! and the gateway share it, so that both tokenize and template a request identically.
//!
//! - [`tokenizer`]: Hugging Face tokenizers, the built-in tokenizer, streaming detokenization.
//! - [`chat_template`]: Jinja chat templates rendered as transformers renders them.
//! - [`chat_prompt`]: a chat request's prompt, checked, rendered and tokenized.
//! - [`model_files`]: a model directory's tokenizer and chat template.

pub mod chat_prompt;
pub mod chat_template;
pub mod model_files;
pub mod tokenize_api;
pub mod tokenizer;
