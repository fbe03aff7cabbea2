//! The built-in tokenizer: a byte-level BPE trained once per process on `assets/corpus.txt`.
//!
//! Training is deterministic, so every process (engine, gateway, tests) gets the same
//! vocabulary without a download.

use super::Tokenizer;
use std::sync::{Arc, OnceLock};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::{ModelWrapper, TrainerWrapper};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, TokenizerBuilder};
use tokenizers::{DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper};

/// The text the built-in tokenizer is trained on.
pub const CORPUS: &str = include_str!("../../assets/corpus.txt");
const VOCAB_SIZE: usize = 2048;

/// The served name of the built-in model (whose tokenizer this is).
pub const BUILTIN_MODEL_NAME: &str = "switchyard-builtin";

/// End of text; also the padding token.
pub const END_OF_TEXT: &str = "<|endoftext|>";
/// Opens a chat turn.
pub const IM_START: &str = "<|im_start|>";
/// Closes a chat turn; ends an assistant answer.
pub const IM_END: &str = "<|im_end|>";

/// The built-in tokenizer, trained on first use.
pub fn builtin_tokenizer() -> Arc<Tokenizer> {
    static BUILT: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    BUILT
        .get_or_init(|| Arc::new(train().expect("the built-in corpus trains a tokenizer")))
        .clone()
}

fn train() -> Result<Tokenizer, super::TokenizerError> {
    let err = |e: tokenizers::Error| super::TokenizerError(e.to_string());
    let specials: Vec<AddedToken> = [END_OF_TEXT, IM_START, IM_END]
        .iter()
        .map(|t| AddedToken::from(*t, true))
        .collect();
    let mut trainer = TrainerWrapper::BpeTrainer(
        BpeTrainerBuilder::new()
            .vocab_size(VOCAB_SIZE)
            .min_frequency(2)
            .show_progress(false)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .special_tokens(specials.clone())
            .build(),
    );
    let mut tokenizer: tokenizers::Tokenizer = TokenizerBuilder::<
        ModelWrapper,
        NormalizerWrapper,
        PreTokenizerWrapper,
        PostProcessorWrapper,
        DecoderWrapper,
    >::new()
    .with_model(BPE::default().into())
    .with_pre_tokenizer(Some(ByteLevel::new(false, true, true).into()))
    .with_decoder(Some(ByteLevel::default().into()))
    .build()
    .map_err(err)?
    .into();
    tokenizer.train(&mut trainer, CORPUS.lines()).map_err(err)?;
    tokenizer.add_special_tokens(&specials);
    Tokenizer::new(tokenizer, &[IM_END, END_OF_TEXT])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_deterministic() {
        let tok = builtin_tokenizer();
        let text = "Hello, world! The router sends each request 42 times. ünïcødé ✓";
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, false), text);
        let again = train().unwrap();
        assert_eq!(again.encode(text, false).unwrap(), ids);
        assert!(tok.vocab_size() > 500, "vocab {}", tok.vocab_size());
    }

    #[test]
    fn special_tokens_are_single_ids() {
        let tok = builtin_tokenizer();
        let ids = tok.encode("<|im_start|>user\nhi<|im_end|>", false).unwrap();
        assert_eq!(ids[0], tok.inner().token_to_id(IM_START).unwrap());
        assert!(tok.is_special(ids[0]));
        assert_eq!(tok.decode(&ids, true), "user\nhi");
        assert_eq!(tok.eos_token_ids().len(), 2);
    }
}
