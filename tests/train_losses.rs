//! GRPO and SFT losses and their logit gradients on hand-computed cases: both clip boundaries
//! (positive and negative advantages), the k3 KL term, masked tokens, zero-advantage
//! (zero-variance group) masking from the token denominator, and a finite-difference check of
//! the full logit gradient.

use execcritic::train::grpo::{grpo_denominator, grpo_loss, token_term, GrpoConfig, GrpoSample};
use execcritic::train::loss::{log_softmax_row, sft_denominator, sft_loss};

const CFG: GrpoConfig = GrpoConfig { clip_low: 0.2, clip_high: 0.28, kl_coef: 0.0, mask_zero_advantage: true };

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-5
}

#[test]
fn clipped_objective_by_hand() {
    let lr = |r: f32| r.ln(); // logp − old giving ratio r
                              // A > 0: above 1+ε_high the clipped branch wins → loss −1.28·A, no gradient.
    let (l, g, c) = token_term(&CFG, lr(1.5), 0.0, None, 1.0);
    assert!(close(l, -1.28) && g == 0.0 && c);
    // A > 0 below 1−ε_low: the unclipped (smaller) term wins → gradient −r·A.
    let (l, g, c) = token_term(&CFG, lr(0.5), 0.0, None, 1.0);
    assert!(close(l, -0.5) && close(g as f64, -0.5) && !c);
    // A < 0 below 1−ε_low: clipped → loss −0.8·A, no gradient.
    let (l, g, c) = token_term(&CFG, lr(0.5), 0.0, None, -1.0);
    assert!(close(l, 0.8) && g == 0.0 && c);
    // A < 0 above 1+ε_high: the unclipped term wins → gradient −r·A = +1.5.
    let (l, g, c) = token_term(&CFG, lr(1.5), 0.0, None, -1.0);
    assert!(close(l, 1.5) && close(g as f64, 1.5) && !c);
    // Inside the trust region: plain ratio objective.
    let (l, g, _) = token_term(&CFG, lr(1.1), 0.0, None, 2.0);
    assert!(close(l, -2.2) && close(g as f64, -2.2));
    // Asymmetry: r = 1.25 is inside for the upper side (0.28) — would be clipped at 0.2.
    let (_, g, c) = token_term(&CFG, lr(1.25), 0.0, None, 1.0);
    assert!(!c && close(g as f64, -1.25));
    // k3 KL: zero at the reference, and e^{d} − d − 1 with d = ref − logp otherwise.
    let kl = GrpoConfig { kl_coef: 0.1, ..CFG };
    let (l, g, _) = token_term(&kl, -1.0, -1.0, Some(-1.0), 0.0);
    assert!(close(l, 0.0) && close(g as f64, 0.0));
    let (l, g, _) = token_term(&kl, -1.0, -1.0, Some(-2.0), 0.0);
    let e = (-1f64).exp();
    assert!(close(l, 0.1 * e) && close(g as f64, 0.1 * (1.0 - e)));
}

fn logprob(logits: &[f32], v: usize, t: usize, y: u32) -> f32 {
    log_softmax_row(&logits[(t - 1) * v..t * v])[y as usize]
}

#[test]
fn grpo_loss_gradient_masks_and_denominator() {
    let v = 4;
    let ids = [0u32, 2, 1, 3];
    let mask = [false, false, true, true]; // token 1 is prompt / tool output
    let logits: Vec<f32> = (0..ids.len() * v).map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.4).collect();
    // Rollout logprobs: token 2 at ratio 1 (inside), token 3 at ratio 1.5 (clipped for A>0).
    let mut old = vec![0.0f32; ids.len()];
    old[2] = logprob(&logits, v, 2, ids[2]);
    old[3] = logprob(&logits, v, 3, ids[3]) - 1.5f32.ln();
    // Hand-computed group-mean advantages of rewards [1, 0, 0, 1] (no std division), and a
    // zero-variance group [0.2, 0.2] whose advantages are 0.
    let advs = [0.5f32, -0.5, -0.5, 0.5, 0.0, 0.0];
    let samples: Vec<GrpoSample<'_>> = advs
        .iter()
        .map(|&a| GrpoSample {
            ids: &ids,
            train_mask: &mask,
            old_logprobs: &old,
            ref_logprobs: None,
            advantage: a,
            routing: None,
        })
        .collect();
    // 4 active samples × 2 trained tokens; the zero-advantage ones are out of the denominator.
    assert_eq!(grpo_denominator(&CFG, &samples), 8);
    let keep = GrpoConfig { mask_zero_advantage: false, ..CFG };
    assert_eq!(grpo_denominator(&keep, &samples), 12);

    let s = &samples[0];
    let out = grpo_loss(&CFG, &logits, v, s, 8.0).unwrap();
    assert_eq!(out.tokens, 2);
    // Loss by hand: token 2 −1·0.5, token 3 clipped −1.28·0.5, over 8 tokens.
    assert!(close(out.loss, (-0.5 - 0.64) / 8.0), "loss {}", out.loss);
    // Rows 0 (predicts a prompt token) and 2 (clipped token) carry no gradient.
    assert!(out.dlogits[..v].iter().all(|&g| g == 0.0));
    assert!(out.dlogits[2 * v..3 * v].iter().all(|&g| g == 0.0));
    assert!(out.dlogits[3 * v..].iter().all(|&g| g == 0.0), "the last row predicts nothing");
    // Row 1 by hand: −A/denom · (onehot − softmax).
    let lp = log_softmax_row(&logits[v..2 * v]);
    for j in 0..v {
        let onehot = if j == ids[2] as usize { 1.0 } else { 0.0 };
        let want = -0.5 / 8.0 * (onehot - lp[j].exp());
        assert!((out.dlogits[v + j] - want).abs() < 1e-6);
    }
    // Finite differences of the loss in the logits (negative advantage: token 3 unclipped).
    let s = &samples[1];
    let out = grpo_loss(&CFG, &logits, v, s, 8.0).unwrap();
    for i in v..3 * v {
        let h = 1e-3;
        let (mut lp_, mut lm) = (logits.clone(), logits.clone());
        lp_[i] += h;
        lm[i] -= h;
        let fd = (grpo_loss(&CFG, &lp_, v, s, 8.0).unwrap().loss - grpo_loss(&CFG, &lm, v, s, 8.0).unwrap().loss)
            / (2.0 * h as f64);
        assert!((fd - out.dlogits[i] as f64).abs() < 1e-4, "dlogits[{i}]: {fd} vs {}", out.dlogits[i]);
    }
    // Zero-advantage sample: nothing, and it does not count tokens.
    let z = grpo_loss(&CFG, &logits, v, &samples[4], 8.0).unwrap();
    assert!(z.loss == 0.0 && z.tokens == 0 && z.dlogits.iter().all(|&g| g == 0.0));
    // Bad inputs are errors.
    assert!(grpo_loss(&CFG, &logits[..v], v, s, 8.0).is_err());
    assert!(grpo_loss(&GrpoConfig { kl_coef: 0.1, ..CFG }, &logits, v, s, 8.0).is_err());
    assert!(grpo_loss(&CFG, &logits, v, s, 0.0).is_err());
}

#[test]
fn sft_trains_assistant_tokens_only_with_batch_denominator() {
    let v = 3;
    let a = ([0u32, 1, 2, 1], [false, false, true, true]);
    let b = ([2u32, 0, 1], [false, true, false]);
    let denom = sft_denominator(&[&a.1, &b.1]);
    assert_eq!(denom, 3);
    let la: Vec<f32> = vec![0.0; 4 * v];
    let lb: Vec<f32> = vec![0.0; 3 * v];
    let oa = sft_loss(&la, v, &a.0, &a.1, denom as f64).unwrap();
    let ob = sft_loss(&lb, v, &b.0, &b.1, denom as f64).unwrap();
    // Uniform logits: every trained token costs ln 3; batch loss is their mean.
    assert!(close(oa.loss + ob.loss, (3f64).ln()));
    assert_eq!((oa.tokens, ob.tokens), (2, 1));
    assert!(oa.dlogits[..v].iter().all(|&g| g == 0.0), "row 0 predicts a user token");
    assert!(ob.dlogits[v..].iter().all(|&g| g == 0.0));
}
