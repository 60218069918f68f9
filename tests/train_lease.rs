//! One copy of the weights, handed between the trainer and the engine (issue 6): the lease
//! moves every parameter buffer into the engine's model and takes the same allocations back
//! (pointer identity), the engine's logits on lent weights equal `Model::load`'s, a holder
//! that is still alive is a clear error, and after an optimizer step the engine samples from
//! the updated weights (its logits equal the training forward's on them).

use execcritic::engine::{Engine, EngineConfig, Request, SamplingParams};
use execcritic::model::source::WeightSource;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::model::{ForwardOptions, LogitsMode, Model, SeqInput};
use execcritic::train::lease::ParamLease;
use execcritic::train::optim::AdamWConfig;
use execcritic::train::policy::GiveBackError;
use execcritic::train::trainer::{SftExample, Trainer};
use execcritic::train::{TapeOptions, TrainError, TrainModel};
use std::path::{Path, PathBuf};

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-qwen35")
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tokenizer")).unwrap()
}

fn trainer(lr: f32) -> Trainer {
    let model = TrainModel::load(&tiny()).unwrap();
    Trainer::new(
        model,
        AdamWConfig {
            lr,
            max_grad_norm: None,
            ..Default::default()
        },
    )
}

const PROMPT: [u32; 5] = [1, 17, 300, 42, 999];

/// The engine's logits at the last prompt position (greedy, one token).
fn engine_logits(engine: &Engine) -> Vec<f32> {
    let req = Request::new(PROMPT.to_vec(), SamplingParams::greedy(1)).with_logits();
    let done = engine.generate_blocking(vec![req]).pop().unwrap().unwrap();
    done.logits[0].clone()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn a_lease_round_trip_moves_the_buffers_and_takes_the_same_ones_back() {
    let tm = TrainModel::load(&tiny()).unwrap();
    let cfg = tm.cfg.clone();
    let before: Vec<(String, *const f32, usize)> = tm
        .store
        .params
        .iter()
        .map(|p| (p.name.clone(), p.data.as_ptr(), p.data.len()))
        .collect();
    let mut lease = ParamLease::new(tm.store);
    let model = Model::from_source(cfg, &mut lease).unwrap();
    assert_eq!(
        lease.lent().len(),
        before.len(),
        "the engine model uses every parameter"
    );
    // The model still holds the buffers: a clear error, and the lease stays usable.
    match lease.reclaim() {
        Err(TrainError::StillLent { count, .. }) => assert_eq!(count, before.len()),
        other => panic!("expected StillLent, got {:?}", other.map(|s| s.len())),
    }
    drop(model);
    let store = lease.reclaim().unwrap();
    let after: Vec<(String, *const f32, usize)> = store
        .params
        .iter()
        .map(|p| (p.name.clone(), p.data.as_ptr(), p.data.len()))
        .collect();
    assert_eq!(
        before, after,
        "same order, same allocations: nothing was copied"
    );
}

#[test]
fn a_lease_checks_names_and_shapes_like_a_checkpoint() {
    let tm = TrainModel::load(&tiny()).unwrap();
    let n = tm.store.len();
    let mut lease = ParamLease::new(tm.store);
    assert!(lease.contains("norm.weight") && !lease.contains("nope.weight"));
    assert_eq!(lease.full_name("norm.weight"), "model.norm.weight");
    assert!(lease.get("nope.weight", &[1]).is_err());
    assert!(
        lease.get("norm.weight", &[3]).is_err(),
        "wrong shape is an error"
    );
    let a = lease.get("norm.weight", &[64]).unwrap();
    let b = lease.get("norm.weight", &[64]).unwrap();
    assert_eq!(
        a.data().as_ptr(),
        b.data().as_ptr(),
        "asking twice shares the one buffer"
    );
    drop((a, b));
    assert_eq!(lease.reclaim().unwrap().len(), n);
}

#[test]
fn the_engine_samples_from_the_very_weights_the_trainer_updates() {
    let mut tr = trainer(1e-2);
    let ptrs: Vec<*const f32> = tr
        .model
        .store
        .params
        .iter()
        .map(|p| p.data.as_ptr())
        .collect();

    // Lent weights give exactly the logits of the checkpoint loaded from disk.
    let reference = Model::load(&tiny()).unwrap();
    let mut state = reference.new_state();
    let opts = ForwardOptions {
        logits: LogitsMode::Last,
        hidden_states: false,
        routing: false,
    };
    let want = reference
        .forward(&mut [SeqInput::new(&PROMPT, &mut state)], &opts)
        .unwrap()[0]
        .logits
        .data()
        .to_vec();
    let lent = tr.lend(tokenizer(), None, EngineConfig::default()).unwrap();
    let before = engine_logits(lent.engine());
    let d0 = max_diff(&before, &want);
    eprintln!("engine on lent weights vs Model::load: max |Δlogit| = {d0:e}");
    assert!(d0 <= 1e-6);

    // A second engine handle blocks the hand-back; dropping it lets it through.
    let extra = lent.engine().clone();
    let GiveBackError { error, policy } = *lent.give_back().unwrap_err();
    assert!(
        matches!(error, TrainError::StillLent { count: 1, .. }),
        "{error}"
    );
    drop(extra);
    policy.give_back().unwrap();
    let back: Vec<*const f32> = tr
        .model
        .store
        .params
        .iter()
        .map(|p| p.data.as_ptr())
        .collect();
    assert_eq!(ptrs, back, "the weights came back without a copy");

    // One optimizer step, then the engine must see the updated weights.
    let ex = SftExample {
        ids: vec![1, 5, 9, 13, 17, 21],
        mask: vec![false, true, true, true, true, true],
    };
    tr.sft_step(&[ex]).unwrap();
    let tape = tr
        .model
        .forward(&PROMPT, None, TapeOptions::default())
        .unwrap();
    let v = tr.model.cfg.vocab_size;
    let trained = tape.logits[(PROMPT.len() - 1) * v..].to_vec();
    let lent = tr.lend(tokenizer(), None, EngineConfig::default()).unwrap();
    let after = engine_logits(lent.engine());
    lent.give_back().unwrap();
    let (moved, d1) = (max_diff(&after, &before), max_diff(&after, &trained));
    eprintln!(
        "after one step: engine logits moved by {moved:e}; engine vs training forward {d1:e}"
    );
    assert!(moved > 1e-3, "the update must reach the engine");
    assert!(d1 <= 1e-4);
}

#[test]
fn a_trainer_without_its_weights_refuses_to_step() {
    let mut tr = trainer(1e-3);
    let lent = tr.lend(tokenizer(), None, EngineConfig::default()).unwrap();
    let extra = lent.engine().clone();
    // Dropping the lent policy while a handle is alive loses the weights for the trainer …
    drop(lent);
    drop(extra);
    let ex = SftExample {
        ids: vec![1, 2, 3],
        mask: vec![false, true, true],
    };
    // … which then says so instead of training on nothing.
    assert!(matches!(tr.sft_step(&[ex]), Err(TrainError::WeightsAway)));
    assert!(matches!(
        tr.lend(tokenizer(), None, EngineConfig::default()),
        Err(TrainError::WeightsAway)
    ));
}
