//! The GRPO policy loss of the paper (App. A): importance ratio against the rollout's
//! log-probabilities, asymmetric clip (ε_low 0.2, ε_high 0.28), per-token aggregation over the
//! whole batch, optional k3 KL penalty against a reference policy (coefficient 0 by default), and
//! masking of trajectories whose advantage is zero (zero-variance groups, operational errors)
//! from the token denominator. Advantages come in from the caller (group-mean centring without
//! std division: [`super::advantage`]).

use super::error::{Result, TrainError};
use super::loss::{log_softmax_row, LossOut};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpoConfig {
    pub clip_low: f32,
    pub clip_high: f32,
    /// Coefficient of the k3 KL estimator against the reference log-probabilities.
    pub kl_coef: f32,
    /// Leave zero-advantage trajectories out of the policy update and of the token count.
    pub mask_zero_advantage: bool,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        GrpoConfig { clip_low: 0.2, clip_high: 0.28, kl_coef: 0.0, mask_zero_advantage: true }
    }
}

/// One trajectory's completion tokens for the loss.
pub struct GrpoSample<'a> {
    /// Full token sequence (prompt + completion).
    pub ids: &'a [u32],
    /// Per token: true when it was sampled by the policy (trained), false for prompt / tool
    /// observation tokens.
    pub train_mask: &'a [bool],
    /// Rollout log-probabilities of `ids[t]` for every token (entries where the mask is false
    /// are ignored).
    pub old_logprobs: &'a [f32],
    /// Reference-policy log-probabilities (only read when `kl_coef > 0`).
    pub ref_logprobs: Option<&'a [f32]>,
    pub advantage: f32,
    /// Routing replay: the rollout's experts per layer `[T · top_k]`, used by the training
    /// forward instead of the router's top-k (so recomputed log-probabilities match the rollout).
    pub routing: Option<&'a [Vec<u32>]>,
}

/// Per-token loss and `d loss / d logp` of the clipped objective plus the k3 KL term.
/// Returns `(loss, dloss_dlogp, clipped)`.
pub fn token_term(cfg: &GrpoConfig, logp: f32, old: f32, reference: Option<f32>, adv: f32) -> (f64, f32, bool) {
    let ratio = (logp - old).exp();
    let clipped = ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high);
    let (un, cl) = (ratio * adv, clipped * adv);
    let (mut loss, mut grad, was_clipped) = if un <= cl { (-un as f64, -un, false) } else { (-cl as f64, 0.0, true) };
    if cfg.kl_coef != 0.0 {
        if let Some(r) = reference {
            let d = r - logp;
            loss += cfg.kl_coef as f64 * (d.exp() - d - 1.0) as f64;
            grad += cfg.kl_coef * (1.0 - d.exp());
        }
    }
    (loss, grad, was_clipped)
}

/// True when this sample takes part in the update under `cfg`.
pub fn is_active(cfg: &GrpoConfig, s: &GrpoSample<'_>) -> bool {
    !(cfg.mask_zero_advantage && s.advantage == 0.0)
}

/// Token denominator of a batch: trained tokens (positions `1..T`) of the active samples.
pub fn grpo_denominator(cfg: &GrpoConfig, batch: &[GrpoSample<'_>]) -> usize {
    batch.iter().filter(|s| is_active(cfg, s)).map(|s| s.train_mask.iter().skip(1).filter(|&&b| b).count()).sum()
}

/// Loss of one sample given the training forward's `logits [T, vocab]`, with `denom` from
/// [`grpo_denominator`]. `LossOut::tokens` counts its trained tokens (0 when masked).
pub fn grpo_loss(cfg: &GrpoConfig, logits: &[f32], v: usize, s: &GrpoSample<'_>, denom: f64) -> Result<LossOut> {
    let n = s.ids.len();
    if n < 2 || logits.len() != n * v || s.train_mask.len() != n || s.old_logprobs.len() != n {
        return Err(TrainError::BadInput(format!(
            "GRPO sample: {n} tokens, {} logits (vocab {v}), {} mask entries, {} rollout logprobs",
            logits.len(),
            s.train_mask.len(),
            s.old_logprobs.len()
        )));
    }
    if s.ref_logprobs.is_some_and(|r| r.len() != n) {
        return Err(TrainError::BadInput("reference logprobs length differs from the tokens".into()));
    }
    if cfg.kl_coef != 0.0 && s.ref_logprobs.is_none() {
        return Err(TrainError::BadInput("kl_coef > 0 needs reference logprobs".into()));
    }
    if denom <= 0.0 {
        return Err(TrainError::BadInput("loss denominator must be positive".into()));
    }
    if let Some(&t) = s.ids.iter().find(|&&t| t as usize >= v) {
        return Err(TrainError::BadInput(format!("token id {t} is outside the vocabulary (size {v})")));
    }
    let mut out = LossOut { loss: 0.0, dlogits: vec![0.0; logits.len()], tokens: 0 };
    if !is_active(cfg, s) {
        return Ok(out);
    }
    for t in 1..n {
        if !s.train_mask[t] {
            continue;
        }
        let row = &logits[(t - 1) * v..t * v];
        let lp = log_softmax_row(row);
        let y = s.ids[t] as usize;
        let (l, g, _) = token_term(cfg, lp[y], s.old_logprobs[t], s.ref_logprobs.map(|r| r[t]), s.advantage);
        out.loss += l / denom;
        // d logp_y / d logits = onehot(y) − softmax.
        let scale = g / denom as f32;
        let d = &mut out.dlogits[(t - 1) * v..t * v];
        for (o, l) in d.iter_mut().zip(&lp) {
            *o -= scale * l.exp();
        }
        d[y] += scale;
        out.tokens += 1;
    }
    Ok(out)
}
