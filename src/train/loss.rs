//! Token-level losses on logits, as pure functions returning the loss and its gradient w.r.t.
//! the logits: log-softmax helpers, the next-token cross-entropy used by SFT (only tokens whose
//! mask is set — assistant tokens — are trained) and by `grads` (every next token, mean NLL).
//! Aggregation is token-level: the caller passes the denominator (trained tokens of the whole
//! batch), so micro-batches of one batch sum to the batch loss.

use super::error::{Result, TrainError};

/// Loss of one sequence's contribution and `d loss / d logits [T, vocab]`.
#[derive(Clone, Debug)]
pub struct LossOut {
    pub loss: f64,
    pub dlogits: Vec<f32>,
    /// Tokens that contributed (mask set).
    pub tokens: usize,
}

/// Row-wise log-softmax of `[rows, v]` logits, computed in f64 for the normaliser.
pub fn log_softmax_row(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = (row.iter().map(|&x| ((x - max) as f64).exp()).sum::<f64>()).ln() as f32 + max;
    row.iter().map(|x| x - lse).collect()
}

/// Log-probability of `ids[t+1]` under row `t`, for `t` in `0..T-1`.
pub fn next_token_logprobs(logits: &[f32], v: usize, ids: &[u32]) -> Result<Vec<f32>> {
    check(logits, v, ids)?;
    Ok((0..ids.len() - 1).map(|t| log_softmax_row(&logits[t * v..(t + 1) * v])[ids[t + 1] as usize]).collect())
}

fn check(logits: &[f32], v: usize, ids: &[u32]) -> Result<()> {
    if ids.len() < 2 {
        return Err(TrainError::BadInput("a sequence needs at least 2 tokens for a next-token loss".into()));
    }
    if logits.len() != ids.len() * v {
        return Err(TrainError::BadInput(format!("logits have {} values, expected {}×{v}", logits.len(), ids.len())));
    }
    if let Some(&t) = ids.iter().find(|&&t| t as usize >= v) {
        return Err(TrainError::BadInput(format!("token id {t} is outside the vocabulary (size {v})")));
    }
    Ok(())
}

/// `d(−log p[target]) / d logits = softmax − onehot`, scaled by `scale`, added into `out`.
pub fn add_nll_grad(row: &[f32], target: usize, scale: f32, out: &mut [f32]) {
    let lp = log_softmax_row(row);
    for (o, l) in out.iter_mut().zip(&lp) {
        *o += scale * l.exp();
    }
    out[target] -= scale;
}

/// Next-token cross-entropy of one sequence: position `t` predicts `ids[t+1]`, trained when
/// `train_mask[t+1]` (so the mask is per token: true on assistant tokens). The loss is
/// `Σ −log p / denom`; `denom` = trained tokens of the whole batch (see [`sft_denominator`]).
pub fn sft_loss(logits: &[f32], v: usize, ids: &[u32], train_mask: &[bool], denom: f64) -> Result<LossOut> {
    check(logits, v, ids)?;
    if train_mask.len() != ids.len() {
        return Err(TrainError::BadInput(format!("mask has {} entries for {} tokens", train_mask.len(), ids.len())));
    }
    if denom <= 0.0 {
        return Err(TrainError::BadInput("loss denominator must be positive".into()));
    }
    let mut dlogits = vec![0.0; logits.len()];
    let (mut loss, mut tokens) = (0.0f64, 0);
    for t in 0..ids.len() - 1 {
        if !train_mask[t + 1] {
            continue;
        }
        let row = &logits[t * v..(t + 1) * v];
        let y = ids[t + 1] as usize;
        loss -= log_softmax_row(row)[y] as f64;
        add_nll_grad(row, y, (1.0 / denom) as f32, &mut dlogits[t * v..(t + 1) * v]);
        tokens += 1;
    }
    Ok(LossOut { loss: loss / denom, dlogits, tokens })
}

/// Trained tokens of a batch of masks (targets are tokens `1..T` of each sequence).
pub fn sft_denominator(masks: &[&[bool]]) -> usize {
    masks.iter().map(|m| m.iter().skip(1).filter(|&&b| b).count()).sum()
}

/// Mean next-token negative log-likelihood over every position (what `execcritic grads` uses).
pub fn mean_nll(logits: &[f32], v: usize, ids: &[u32]) -> Result<LossOut> {
    let mask = vec![true; ids.len()];
    sft_loss(logits, v, ids, &mask, (ids.len().max(2) - 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_entropy_by_hand() {
        // Two positions over a 3-token vocabulary; only the second target is trained.
        let logits = [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0];
        let ids = [0, 1, 2];
        let out = sft_loss(&logits, 3, &ids, &[false, false, true], 1.0).unwrap();
        let z: f64 = (1f64).exp() + (2f64).exp() + (3f64).exp();
        assert!((out.loss - (z.ln() - 3.0)).abs() < 1e-6);
        assert_eq!(out.tokens, 1);
        assert!(out.dlogits[..3].iter().all(|&g| g == 0.0), "masked position has no gradient");
        let p: Vec<f64> = [1.0f64, 2.0, 3.0].iter().map(|x| x.exp() / z).collect();
        assert!((out.dlogits[3] as f64 - p[0]).abs() < 1e-6);
        assert!((out.dlogits[5] as f64 - (p[2] - 1.0)).abs() < 1e-6);
        assert!(out.dlogits[6..].iter().all(|&g| g == 0.0), "the last row predicts nothing");
        // Uniform row: loss ln 3 per token; mean over both positions.
        let all = mean_nll(&logits, 3, &ids).unwrap();
        assert!((all.loss - ((3f64).ln() + z.ln() - 3.0) / 2.0).abs() < 1e-6);
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(sft_loss(&[0.0; 6], 3, &[0, 1], &[true], 1.0).is_err());
        assert!(sft_loss(&[0.0; 6], 3, &[0, 7], &[true, true], 1.0).is_err());
        assert!(sft_loss(&[0.0; 3], 3, &[0], &[true], 1.0).is_err());
        assert!(sft_loss(&[0.0; 6], 3, &[0, 1], &[true, true], 0.0).is_err());
    }
}
