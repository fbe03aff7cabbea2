//! What the simulated clients tell the scheduler of their answers' lengths (`sim
//! --client-max-tokens`).

/// The `max_tokens` the simulated clients send, which is all the scheduler knows of an answer's
/// length before it ends; the engines generate the workload's answer lengths either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClientMaxTokens {
    /// The answer's length, as benchmark clients send it with `ignore_eos`.
    #[default]
    Exact,
    /// A cap the answers end under (at their end-of-sequence): this many tokens, or the
    /// answer's length if it is longer (its client must have allowed it).
    Cap(u32),
    /// None, as most chat clients send.
    Unsent,
}

impl ClientMaxTokens {
    /// What a client whose answer has `answer` tokens sends.
    pub fn sent(self, answer: u32) -> u32 {
        match self {
            ClientMaxTokens::Exact => answer,
            ClientMaxTokens::Cap(cap) => cap.max(answer),
            ClientMaxTokens::Unsent => 0,
        }
    }
}

impl std::str::FromStr for ClientMaxTokens {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "exact" => Ok(ClientMaxTokens::Exact),
            "none" => Ok(ClientMaxTokens::Unsent),
            n => match n.parse::<u32>() {
                Ok(cap) if cap > 0 => Ok(ClientMaxTokens::Cap(cap)),
                _ => Err(format!(
                    "{s:?} is not `exact`, `none` or a positive number of tokens"
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_send_the_answer_length_a_cap_over_it_or_nothing() {
        let parse = |s: &str| s.parse::<ClientMaxTokens>();
        assert_eq!(parse("exact").unwrap().sent(300), 300);
        assert_eq!(parse("4096").unwrap().sent(300), 4096);
        assert_eq!(
            parse("4096").unwrap().sent(5000),
            5000,
            "the answer had room"
        );
        assert_eq!(parse("none").unwrap().sent(300), 0);
        for bad in ["0", "-1", "lots", ""] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
