//! `switchyard forward`: runs a backend directly on token ids, without the server or the batch
//! scheduler, to check it against a reference implementation and to measure it.
//!
//! - `--prompt 1,2,3 --logits-out FILE`: prefill the prompt, write the logits of its last
//!   position (little-endian f32, one per vocabulary entry), then decode `--greedy-tokens`
//!   tokens greedily and print them as JSON; with `--greedy-copies N`, N copies of the prompt
//!   decode in one batch (large batches take other kernel paths) and each copy's tokens print.
//! - `--bench-batches 1,8,64`: for each batch size, prefill that many `--bench-prompt-len`-token
//!   prompts, then decode `--bench-decode-steps` steps of the whole batch; print prefill and
//!   decode tokens per second as JSON lines (each batch size runs once untimed first, to warm up).

use crate::backend::{Backend, BatchSeq, ModelBatch};
use crate::config::EngineArgs;
use crate::sampling::{NextToken, SamplingParams};
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::time::Instant;

/// Flags of `switchyard forward`.
#[derive(Debug, Clone, clap::Args)]
pub struct ForwardArgs {
    /// The backend and model, as for `switchyard engine`.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Prompt token ids, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub prompt: Vec<u32>,
    /// Write the prompt's last-position logits here.
    #[arg(long)]
    pub logits_out: Option<PathBuf>,
    /// Greedy tokens to generate after the prompt.
    #[arg(long, default_value_t = 32)]
    pub greedy_tokens: usize,
    /// Decode the greedy tokens of this many copies of the prompt in one batch (large batches
    /// take other kernel paths than one sequence does); each copy's tokens are printed.
    #[arg(long, default_value_t = 1)]
    pub greedy_copies: usize,
    /// Batch sizes to measure, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub bench_batches: Vec<usize>,
    /// Prompt length of each measured sequence.
    #[arg(long, default_value_t = 512)]
    pub bench_prompt_len: usize,
    /// Decode steps measured per batch size.
    #[arg(long, default_value_t = 64)]
    pub bench_decode_steps: usize,
}

/// One sequence driven by hand: its tokens and its KV blocks.
struct Driven {
    tokens: Vec<u32>,
    computed: usize,
    blocks: Vec<u32>,
}

/// Hands out KV blocks in order; never frees (each run is short).
struct Blocks {
    next: u32,
    total: usize,
    block_size: usize,
}

impl Blocks {
    fn cover(&mut self, seq: &mut Driven, len: usize) -> anyhow::Result<()> {
        while seq.blocks.len() * self.block_size < len {
            if self.next as usize >= self.total {
                bail!(
                    "the KV cache ({} blocks) is too small for this run",
                    self.total
                );
            }
            seq.blocks.push(self.next);
            self.next += 1;
        }
        Ok(())
    }
}

fn step(
    backend: &mut dyn Backend,
    seqs: &mut [Driven],
    blocks: &mut Blocks,
    chunk: usize,
    next: NextToken,
) -> anyhow::Result<Vec<Option<crate::sampling::Logits>>> {
    let mut batch = ModelBatch::default();
    for (id, seq) in seqs.iter_mut().enumerate() {
        let end = (seq.computed + chunk).min(seq.tokens.len());
        blocks.cover(seq, end)?;
        batch.seqs.push(BatchSeq {
            seq: id as u64,
            tokens: seq.tokens[seq.computed..end].to_vec(),
            start: seq.computed,
            block_table: seq.blocks.clone(),
            sample: end == seq.tokens.len(),
            fingerprint: 0,
            next: next.clone(),
        });
        seq.computed = end;
    }
    Ok(backend.execute(&batch).logits)
}

/// The greedy choice, as the engine's sampler makes it.
fn argmax(logits: &crate::sampling::Logits) -> u32 {
    crate::sampling::sample(logits.clone(), &SamplingParams::greedy(), &[], &[], 0).token
}

/// One instance of the backend `args` name, driven by hand.
struct Driver {
    backend: Box<dyn Backend>,
    blocks: Blocks,
    /// Tokens a step may carry.
    budget: usize,
    vocab: usize,
}

impl Driver {
    fn start(args: &ForwardArgs) -> anyhow::Result<Self> {
        let parts = args
            .engine
            .build(1)?
            .pop()
            .expect("one instance was asked for");
        Ok(Self {
            blocks: Blocks {
                next: 0,
                total: parts.core.num_blocks,
                block_size: parts.core.block_size,
            },
            budget: parts.core.max_num_batched_tokens,
            vocab: parts.tokenizer.vocab_size().max(2),
            backend: parts.backend,
        })
    }
}

/// Runs `switchyard forward`.
pub fn run(args: ForwardArgs) -> anyhow::Result<()> {
    let Driver {
        mut backend,
        mut blocks,
        budget,
        vocab,
    } = Driver::start(&args)?;
    if let Some(bad) = args.prompt.iter().find(|&&t| t as usize >= vocab) {
        bail!("prompt token {bad} is outside the vocabulary of {vocab}");
    }
    if !args.prompt.is_empty() {
        let (logits, copies) = greedy(backend.as_mut(), &mut blocks, &args, budget)?;
        if let Some(path) = &args.logits_out {
            let bytes: Vec<u8> = logits
                .values()
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            std::fs::write(path, bytes)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        println!(
            "{}",
            serde_json::json!({ "prompt": args.prompt, "greedy": copies[0], "copies": copies })
        );
    }
    for &batch in &args.bench_batches {
        // The first run of a batch size is a warm-up: it loads cuBLAS's kernels for these
        // shapes and captures the decode graphs, as a serving engine has long done.
        measure_batch(backend.as_mut(), &mut blocks, &args, batch, budget, vocab)?;
        let (prefill, decode) =
            measure_batch(backend.as_mut(), &mut blocks, &args, batch, budget, vocab)?;
        let steps = args.bench_decode_steps as f64;
        println!(
            "{}",
            serde_json::json!({
                "batch": batch,
                "prompt_len": args.bench_prompt_len,
                "prefill_tokens_per_s": (batch * args.bench_prompt_len) as f64 / prefill,
                "decode_steps": args.bench_decode_steps,
                "decode_step_ms": decode / steps * 1e3,
                "decode_tokens_per_s": batch as f64 * steps / decode,
            })
        );
    }
    Ok(())
}

/// Prefills `--greedy-copies` copies of the prompt in one batch and decodes them greedily: the
/// first copy's last-position logits of the prompt, and each copy's tokens.
fn greedy(
    backend: &mut dyn Backend,
    blocks: &mut Blocks,
    args: &ForwardArgs,
    budget: usize,
) -> anyhow::Result<(crate::sampling::Logits, Vec<Vec<u32>>)> {
    let copies = args.greedy_copies.max(1);
    let mut seqs: Vec<Driven> = (0..copies)
        .map(|_| Driven {
            tokens: args.prompt.clone(),
            computed: 0,
            blocks: Vec::new(),
        })
        .collect();
    // Each step carries a share of the token budget per copy, so the batch stays within it.
    let chunk = (budget / copies).max(1);
    let mut last = Vec::new();
    while seqs[0].computed < seqs[0].tokens.len() {
        last = step(backend, &mut seqs, blocks, chunk, NextToken::Scores)?;
    }
    let first = last
        .first()
        .cloned()
        .flatten()
        .context("the backend returned no logits for the prompt")?;
    let mut generated: Vec<Vec<u32>> = last
        .iter()
        .map(|l| l.as_ref().map(argmax).into_iter().collect())
        .collect();
    while generated[0].len() < args.greedy_tokens {
        for (seq, tokens) in seqs.iter_mut().zip(&generated) {
            seq.tokens
                .push(*tokens.last().context("a copy got no token")?);
        }
        let next = step(backend, &mut seqs, blocks, 1, NextToken::Argmax)?;
        for (tokens, logits) in generated.iter_mut().zip(next) {
            tokens.push(argmax(&logits.context("no logits for a decode step")?));
        }
    }
    Ok((first, generated))
}

/// Prefills `batch` prompts and decodes them for the measured number of steps; the seconds each
/// phase took.
fn measure_batch(
    backend: &mut dyn Backend,
    blocks: &mut Blocks,
    args: &ForwardArgs,
    batch: usize,
    budget: usize,
    vocab: usize,
) -> anyhow::Result<(f64, f64)> {
    blocks.next = 0;
    let mut seqs: Vec<Driven> = (0..batch)
        .map(|b| Driven {
            tokens: (0..args.bench_prompt_len)
                .map(|i| ((i * 31 + b * 17) % (vocab - 1) + 1) as u32)
                .collect(),
            computed: 0,
            blocks: Vec::new(),
        })
        .collect();
    let started = Instant::now();
    let per_seq_chunk = (budget / batch.max(1)).max(1);
    let mut last = Vec::new();
    while seqs.iter().any(|s| s.computed < s.tokens.len()) {
        last = step(backend, &mut seqs, blocks, per_seq_chunk, NextToken::Argmax)?;
    }
    let prefill = started.elapsed().as_secs_f64();
    for (seq, logits) in seqs.iter_mut().zip(&last) {
        seq.tokens.push(logits.as_ref().map_or(0, argmax));
    }
    let started = Instant::now();
    for _ in 0..args.bench_decode_steps {
        let out = step(backend, &mut seqs, blocks, 1, NextToken::Argmax)?;
        for (seq, logits) in seqs.iter_mut().zip(&out) {
            seq.tokens.push(logits.as_ref().map_or(0, argmax));
        }
    }
    Ok((prefill, started.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        forward: ForwardArgs,
    }

    #[test]
    fn copies_in_one_batch_decode_what_one_sequence_does() {
        let args = |copies: &str| {
            Cli::parse_from([
                "forward",
                "--backend",
                "cpu",
                "--prompt",
                "17,230,5,99,412,7",
                "--greedy-tokens",
                "5",
                "--greedy-copies",
                copies,
            ])
            .forward
        };
        let decode = |args: &ForwardArgs| {
            let mut d = Driver::start(args).unwrap();
            greedy(d.backend.as_mut(), &mut d.blocks, args, d.budget)
                .unwrap()
                .1
        };
        let one = decode(&args("1"));
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].len(), 5);
        assert_eq!(decode(&args("3")), vec![one[0].clone(); 3]);
    }
}
