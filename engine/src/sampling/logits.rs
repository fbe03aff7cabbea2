//! The scores a backend returns for one sequence's next token.

/// Next-token scores: dense over the vocabulary, or over a candidate subset of token ids.
#[derive(Debug, Clone, PartialEq)]
pub struct Logits {
    ids: Option<Vec<u32>>,
    values: Vec<f32>,
}

impl Logits {
    /// Scores for every token id `0..values.len()`.
    pub fn dense(values: Vec<f32>) -> Self {
        Logits { ids: None, values }
    }

    /// Scores for the candidate token `ids[i]`; every other token is impossible.
    pub fn sparse(ids: Vec<u32>, values: Vec<f32>) -> Self {
        assert_eq!(ids.len(), values.len(), "one score per candidate");
        Logits {
            ids: Some(ids),
            values,
        }
    }

    /// Number of scored tokens.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no token is scored.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Token id of the `i`-th score.
    pub fn id(&self, i: usize) -> u32 {
        match &self.ids {
            Some(ids) => ids[i],
            None => i as u32,
        }
    }

    /// Position of `token` among the scores, if scored.
    pub fn position(&self, token: u32) -> Option<usize> {
        match &self.ids {
            Some(ids) => ids.iter().position(|&t| t == token),
            None => ((token as usize) < self.values.len()).then_some(token as usize),
        }
    }

    /// The scores.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The scores, to change in place.
    pub fn values_mut(&mut self) -> &mut [f32] {
        &mut self.values
    }
}
