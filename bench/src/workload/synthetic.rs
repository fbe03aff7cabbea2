//! Generated workloads, deterministic for a seed: Poisson or gamma-bursty arrivals of plain
//! requests, of users sharing a group's long system prompt, or of multi-turn chats whose history
//! grows turn by turn as their users answer.

use super::{BenchRequest, Message, Prompt};
use crate::text::{Span, Words};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Gamma};

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// Exponential gaps at `rate` requests per second.
    Poisson {
        /// Mean requests per second.
        rate: f64,
    },
    /// Gamma gaps with mean `1 / rate`; `shape` below 1 makes bursts (1 is Poisson).
    Gamma {
        /// Mean requests per second.
        rate: f64,
        /// Shape of the gap distribution.
        shape: f64,
    },
}

impl Arrivals {
    /// `n` arrival times in seconds, the first at 0.
    pub fn times(&self, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut t = 0.0;
        let mut times = Vec::with_capacity(n);
        for i in 0..n {
            if i > 0 {
                t += match *self {
                    Arrivals::Poisson { rate } => {
                        Exp::new(rate).expect("rate > 0").sample(&mut rng)
                    }
                    Arrivals::Gamma { rate, shape } => Gamma::new(shape, 1.0 / (rate * shape))
                        .expect("shape and rate > 0")
                        .sample(&mut rng),
                };
            }
            times.push(t);
        }
        times
    }
}

/// Seeds of generated texts, kept apart by kind.
const PLAIN_SEED: u64 = 0x706c_6169_6e00_0000;
const SYSTEM_SEED: u64 = 0x7379_7374_656d_0000;
const QUESTION_SEED: u64 = 0x7175_6573_7400_0000;
const TURN_SEED: u64 = 0x7475_726e_0000_0000;

/// `n` requests of `input` prompt tokens and `output` generated tokens, each prompt its own.
pub fn plain(
    n: usize,
    input: usize,
    output: u32,
    arrivals: Arrivals,
    seed: u64,
) -> Vec<BenchRequest> {
    arrivals
        .times(n, seed)
        .into_iter()
        .enumerate()
        .map(|(i, at)| BenchRequest {
            at,
            prompt: Prompt::Text(vec![Span {
                seed: PLAIN_SEED ^ seed ^ (i as u64) << 20,
                count: input,
            }]),
            prompt_tokens: input,
            max_tokens: output,
            session: None,
        })
        .collect()
}

/// Sizes of a shared-prefix workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedPrefix {
    /// Groups, each with its own system prompt.
    pub groups: usize,
    /// Users per group, one question each.
    pub users_per_group: usize,
    /// System prompt tokens.
    pub system_tokens: usize,
    /// Question tokens.
    pub question_tokens: usize,
    /// Generated tokens.
    pub output: u32,
}

/// Every user of every group asks once, in an order drawn from `seed`: a chat of the group's
/// system prompt and the user's question.
pub fn shared_prefix(
    spec: SharedPrefix,
    arrivals: Arrivals,
    words: &Words,
    form: PromptForm,
    seed: u64,
) -> Vec<BenchRequest> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut askers: Vec<(usize, usize)> = (0..spec.groups)
        .flat_map(|g| (0..spec.users_per_group).map(move |u| (g, u)))
        .collect();
    for i in (1..askers.len()).rev() {
        askers.swap(i, rng.random_range(0..=i));
    }
    let times = arrivals.times(askers.len(), seed ^ 1);
    askers
        .into_iter()
        .zip(times)
        .map(|((g, u), at)| BenchRequest {
            at,
            prompt: form.prompt(
                words,
                vec![
                    (
                        "system",
                        Span {
                            seed: SYSTEM_SEED ^ seed ^ g as u64,
                            count: spec.system_tokens,
                        },
                    ),
                    (
                        "user",
                        Span {
                            seed: QUESTION_SEED ^ seed ^ ((g as u64) << 24) ^ u as u64,
                            count: spec.question_tokens,
                        },
                    ),
                ],
            ),
            prompt_tokens: spec.system_tokens + spec.question_tokens,
            max_tokens: spec.output,
            session: None,
        })
        .collect()
}

/// How a generated conversation is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptForm {
    /// As chat messages (`/v1/chat/completions`).
    Chat,
    /// The messages' texts as one completion prompt: the same prefixes, without the chat
    /// template, and no tokenizer needed to simulate it.
    Text,
}

impl PromptForm {
    /// The prompt of `messages`, each a role and the words of its text.
    fn prompt(self, words: &Words, messages: Vec<(&'static str, Span)>) -> Prompt {
        match self {
            PromptForm::Chat => Prompt::Chat(
                messages
                    .into_iter()
                    .map(|(role, span)| Message {
                        role,
                        content: words.text(span.seed, span.count),
                    })
                    .collect(),
            ),
            PromptForm::Text => Prompt::Text(messages.into_iter().map(|(_, span)| span).collect()),
        }
    }
}

/// Sizes of a multi-turn workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MultiTurn {
    /// Conversations.
    pub conversations: usize,
    /// Turns of each.
    pub turns: usize,
    /// Tokens of each user message.
    pub user_tokens: usize,
    /// Tokens of each answer (generated, and put in the history of later turns).
    pub answer_tokens: u32,
    /// Mean seconds a user takes to send the next turn, after the answer.
    pub think_seconds: f64,
}

/// Seconds an answer takes a token to arrive, before the user reads it.
const TOKEN_SECONDS: f64 = 0.02;

/// Conversations starting at the times `arrivals` draws, each sending its next turn once the
/// last answer has streamed and the user has thought (exponential, `think_seconds` on average);
/// turn k carries the k - 1 earlier exchanges (with answers of the planned length) before its
/// question, so each turn's prompt extends the last one's.
pub fn multi_turn(
    spec: MultiTurn,
    arrivals: Arrivals,
    words: &Words,
    form: PromptForm,
    seed: u64,
) -> Vec<BenchRequest> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let think = Exp::new(1.0 / spec.think_seconds.max(1e-9)).expect("a positive mean");
    let mut order = Vec::with_capacity(spec.conversations * spec.turns);
    for (c, start) in arrivals
        .times(spec.conversations, seed ^ 1)
        .into_iter()
        .enumerate()
    {
        let mut at = start;
        for turn in 0..spec.turns {
            order.push((at, c, turn));
            at += spec.answer_tokens as f64 * TOKEN_SECONDS + think.sample(&mut rng);
        }
    }
    order.sort_by(|a, b| a.0.total_cmp(&b.0));
    let text = |c: usize, turn: usize, who: u64, count: usize| Span {
        seed: TURN_SEED ^ seed ^ ((c as u64) << 32) ^ ((turn as u64) << 8) ^ who,
        count,
    };
    order
        .into_iter()
        .map(|(at, c, turn)| {
            let mut messages = Vec::with_capacity(2 * turn + 1);
            for k in 0..turn {
                messages.push(("user", text(c, k, 0, spec.user_tokens)));
                messages.push(("assistant", text(c, k, 1, spec.answer_tokens as usize)));
            }
            messages.push(("user", text(c, turn, 0, spec.user_tokens)));
            BenchRequest {
                at,
                prompt: form.prompt(words, messages),
                prompt_tokens: (turn + 1) * spec.user_tokens + turn * spec.answer_tokens as usize,
                max_tokens: spec.answer_tokens,
                session: Some(c as u32),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_repeat_for_a_seed_and_keep_their_mean_rate() {
        for arrivals in [
            Arrivals::Poisson { rate: 4.0 },
            Arrivals::Gamma {
                rate: 4.0,
                shape: 0.25,
            },
        ] {
            let times = arrivals.times(4000, 11);
            assert_eq!(times, arrivals.times(4000, 11));
            assert_ne!(times, arrivals.times(4000, 12));
            assert_eq!(times[0], 0.0);
            assert!(times.windows(2).all(|w| w[1] >= w[0]));
            let rate = (times.len() - 1) as f64 / times.last().unwrap();
            assert!((rate - 4.0).abs() < 0.4, "{arrivals:?}: {rate}");
        }
        // Gamma gaps with shape < 1 are burstier: more of them are tiny.
        let tiny = |times: Vec<f64>| times.windows(2).filter(|w| w[1] - w[0] < 0.01).count();
        let poisson = tiny(Arrivals::Poisson { rate: 4.0 }.times(4000, 3));
        let bursty = tiny(
            Arrivals::Gamma {
                rate: 4.0,
                shape: 0.25,
            }
            .times(4000, 3),
        );
        assert!(bursty > 3 * poisson, "{bursty} vs {poisson}");
    }

    #[test]
    fn generators_are_deterministic_for_a_seed() {
        let words = Words::builtin();
        let arrivals = Arrivals::Poisson { rate: 10.0 };
        let spec = SharedPrefix {
            groups: 3,
            users_per_group: 4,
            system_tokens: 50,
            question_tokens: 5,
            output: 8,
        };
        let a = shared_prefix(spec, arrivals, &words, PromptForm::Chat, 5);
        assert_eq!(
            a,
            shared_prefix(spec, arrivals, &words, PromptForm::Chat, 5)
        );
        assert_ne!(
            a,
            shared_prefix(spec, arrivals, &words, PromptForm::Chat, 6)
        );
        assert_eq!(a.len(), 12);
        let systems: std::collections::BTreeSet<String> = a
            .iter()
            .map(|r| match &r.prompt {
                Prompt::Chat(m) => m[0].content.clone(),
                Prompt::Text(_) => unreachable!(),
            })
            .collect();
        assert_eq!(systems.len(), 3, "one system prompt a group");
        let p = plain(5, 20, 4, arrivals, 9);
        assert_eq!(p, plain(5, 20, 4, arrivals, 9));
        assert_ne!(p[0].prompt, p[1].prompt);
    }

    #[test]
    fn each_turn_extends_the_last_one_of_its_conversation() {
        let words = Words::builtin();
        let spec = MultiTurn {
            conversations: 3,
            turns: 4,
            user_tokens: 6,
            answer_tokens: 9,
            think_seconds: 1.0,
        };
        let poisson = Arrivals::Poisson { rate: 5.0 };
        let r = multi_turn(spec, poisson, &words, PromptForm::Chat, 2);
        assert_eq!(r.len(), 12);
        assert_eq!(r, multi_turn(spec, poisson, &words, PromptForm::Chat, 2));
        let chats: Vec<&Vec<Message>> = r
            .iter()
            .map(|q| match &q.prompt {
                Prompt::Chat(m) => m,
                Prompt::Text(_) => unreachable!(),
            })
            .collect();
        for (i, later) in chats.iter().enumerate() {
            let turn = later.len() / 2;
            if turn == 0 {
                continue;
            }
            let earlier = chats[..i]
                .iter()
                .find(|c| c.len() == later.len() - 2 && later.starts_with(&c[..]))
                .expect("the previous turn came first and is a prefix");
            assert_eq!(earlier[0], later[0]);
            assert_eq!(r[i].prompt_tokens, (turn + 1) * 6 + turn * 9);
        }
    }
}
