//! Table-driven tests of the paper's rewards (eq. 5–6) and the GRPO group utilities.

use execcritic::episode::rewards::*;

fn c(correct: bool, passed: bool) -> CandidateResult {
    CandidateResult { correct, passed }
}

#[test]
fn balanced_accuracy_table() {
    let cases: &[(&[CandidateResult], f64)] = &[
        (&[c(true, true), c(false, false)], 1.0),
        (&[c(true, false), c(false, true)], 0.0),
        (&[c(true, true), c(true, false), c(false, false)], 0.75),
        (
            &[
                c(true, true),
                c(false, false),
                c(false, false),
                c(false, true),
            ],
            0.5 * (1.0 + 2.0 / 3.0),
        ),
        // Single-class pools: the absent class's recall is 0, so BA <= 0.5.
        (&[c(true, true), c(true, true)], 0.5),
        (&[c(false, false)], 0.5),
        (&[c(false, true)], 0.0),
        (&[], 0.0),
    ];
    for (cands, want) in cases {
        let got = balanced_accuracy(cands);
        assert!((got - want).abs() < 1e-12, "{cands:?}: {got} != {want}");
    }
}

#[test]
fn test_reward_every_tier() {
    let audited = |b, g, cands: Vec<CandidateResult>| TestAudit::Audited {
        base_clean_fail: b,
        gold_pass: g,
        candidates: cands,
    };
    let perfect = vec![c(true, true), c(false, false)];
    // BA = 0.875: positives 1/1, negatives 3/4.
    let good = vec![
        c(true, true),
        c(false, false),
        c(false, false),
        c(false, false),
        c(false, true),
    ];
    let weak = vec![c(true, false), c(false, false)]; // 0.5
    let cases = [
        (TestAudit::NoValidSubmission, Reward::Value(-0.2)),
        (TestAudit::OperationalError, Reward::Masked),
        (audited(false, true, perfect.clone()), Reward::Value(0.0)),
        (audited(true, false, perfect.clone()), Reward::Value(0.0)),
        (audited(false, false, perfect.clone()), Reward::Value(0.0)),
        (audited(true, true, weak), Reward::Value(0.2)),
        (audited(true, true, good), Reward::Value(0.5)),
        (audited(true, true, perfect), Reward::Value(1.0)),
        // Single-class pool can never exceed the 0.2 tier.
        (
            audited(true, true, vec![c(true, true), c(true, true)]),
            Reward::Value(0.2),
        ),
        (audited(true, true, vec![]), Reward::Value(0.2)),
    ];
    for (audit, want) in cases {
        assert_eq!(test_reward(&audit), want, "{audit:?}");
    }
}

#[test]
fn ba_boundaries() {
    // Exactly 0.8 is the 0.5 tier: TPR 1.0, TNR 0.6.
    let mut cands = vec![c(true, true)];
    cands.extend([
        c(false, false),
        c(false, false),
        c(false, false),
        c(false, true),
        c(false, true),
    ]);
    assert!((balanced_accuracy(&cands) - 0.8).abs() < 1e-12);
    let a = TestAudit::Audited {
        base_clean_fail: true,
        gold_pass: true,
        candidates: cands,
    };
    assert_eq!(test_reward(&a), Reward::Value(0.5));
}

#[test]
fn repair_reward_every_tier() {
    use RepairTerminal::*;
    let v = |s, o, r| Valid {
        selected_test_pass: s,
        official_pass: o,
        round: r,
    };
    let cases = [
        (InvalidPatch, Reward::Value(0.0)),
        (OperationalError, Reward::Masked),
        (v(false, false, 0), Reward::Value(0.1)),
        (v(false, true, 0), Reward::Value(0.1)), // officially correct but rejected by the test
        (v(false, true, 3), Reward::Value(0.1)),
        (v(true, false, 0), Reward::Value(0.2)),
        (v(true, false, 5), Reward::Value(0.2)),
        (v(true, true, 1), Reward::Value(1.0)),
        (v(true, true, 5), Reward::Value(1.0)),
        (v(true, true, 0), Reward::Value(1.5)),
    ];
    for (t, want) in cases {
        assert_eq!(repair_reward(&t), want, "{t:?}");
    }
}

#[test]
fn length_penalty_within_tier() {
    use Reward::*;
    let rewards = [
        Value(1.0),
        Value(1.0),
        Value(1.0),
        Value(0.5),
        Value(0.5),
        Value(-0.2),
        Value(0.0),
        Masked,
    ];
    let turns = [10, 18, 19, 30, 39, 100, 100, 100];
    let group: Vec<(Reward, usize)> = rewards.iter().copied().zip(turns).collect();
    let got = apply_length_penalty(&group);
    assert_eq!(
        got,
        vec![
            Value(1.0),
            Value(1.0),
            Value(0.5),
            Value(0.5),
            Value(0.25),
            Value(-0.2),
            Value(0.0),
            Masked
        ]
    );
}

#[test]
fn advantages_mean_centred_without_std_and_masked() {
    use Reward::*;
    let adv = group_advantages(&[Value(1.0), Value(0.0), Masked, Value(0.5)]);
    assert_eq!(adv, vec![0.5, -0.5, 0.0, 0.0]);
    // No std division: scaling rewards scales advantages.
    let adv2 = group_advantages(&[Value(2.0), Value(0.0), Masked, Value(1.0)]);
    assert_eq!(adv2, vec![1.0, -1.0, 0.0, 0.0]);
    assert_eq!(group_advantages(&[Masked, Masked]), vec![0.0, 0.0]);
    assert!(has_reward_variance(&[Value(1.0), Value(0.0)]));
    assert!(!has_reward_variance(&[Value(0.2), Value(0.2), Masked]));
    assert!(!has_reward_variance(&[Masked]));
}

#[test]
fn candidate_pool_dedup_cap_balance() {
    let patches: Vec<(String, bool)> = (0..12)
        .map(|i| (format!("diff {}\n", i % 10), i < 3))
        .chain([("diff 0  \n".to_string(), true), (String::new(), false)])
        .collect();
    let refs: Vec<(&str, bool)> = patches.iter().map(|(p, l)| (p.as_str(), *l)).collect();
    let chosen = select_candidates(&refs);
    assert_eq!(chosen.len(), CANDIDATE_CAP);
    // All three positives are kept (balanced), no duplicate text, no empty patch.
    assert_eq!(chosen.iter().filter(|&&i| refs[i].1).count(), 3);
    let texts: std::collections::HashSet<&str> =
        chosen.iter().map(|&i| refs[i].0.trim_end()).collect();
    assert_eq!(texts.len(), CANDIDATE_CAP);
}
