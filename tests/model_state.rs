//! The forward API contract the engine builds on: a cloned `SeqState` resumes exactly (a new turn
//! appended to a snapshot equals a fresh prefill of the whole conversation), mixed batches of
//! prefill and decode equal separate runs, routing replay reproduces a run, tied heads use the
//! embedding, bad inputs are typed errors, and the `logits` CLI matches the references.

#[path = "model_common.rs"]
mod common;

use common::*;
use execcritic::model::{ForwardOptions, LogitsMode, Model, ModelError, SeqInput};

const MAIN: &str = "tiny-qwen35";

fn opts_all() -> ForwardOptions {
    ForwardOptions {
        logits: LogitsMode::All,
        ..Default::default()
    }
}

#[test]
fn resumed_snapshot_equals_fresh_prefill_of_whole_conversation() {
    let model = Model::load(&fixture(MAIN)).unwrap();
    let r = Reference::load(MAIN);
    let a = &r.ids["ids.a"];
    let v = model.config().vocab_size;
    // Turn 1 (45 tokens), snapshot, then turn 2 (a 30-token observation) and 5 decode steps.
    let mut st = model.new_state();
    run_chunks(&model, &mut st, a, &[45]);
    let mut pos_state = st.clone();
    let mut logits = Vec::new();
    for (start, len) in [(45, 30), (75, 1), (76, 1), (77, 1), (78, 1), (79, 1)] {
        let mut b = [SeqInput::new(&a[start..start + len], &mut pos_state)];
        logits.extend_from_slice(model.forward(&mut b, &opts_all()).unwrap()[0].logits.data());
    }
    let fresh = full(&model, a);
    assert_close("resumed vs fresh", &logits, &fresh.logits.data()[45 * v..], 1e-4);
    assert_eq!(pos_state.len(), 80);
    // The original state was not disturbed by its clones.
    assert_eq!(st.len(), 45);
}

#[test]
fn mixed_batch_of_prefill_and_decode_equals_separate_runs() {
    let model = Model::load(&fixture(MAIN)).unwrap();
    let r = Reference::load(MAIN);
    let (a, b) = (&r.ids["ids.a"], &r.ids["ids.b"]);
    let v = model.config().vocab_size;
    let mut sa = model.new_state();
    run_chunks(&model, &mut sa, a, &[79]);
    let mut sb = model.new_state();
    // One step: sequence b prefills 37 tokens while sequence a decodes its 80th token.
    let mut batch = [SeqInput::new(&b[..], &mut sb), SeqInput::new(&a[79..], &mut sa)];
    let outs = model
        .forward(
            &mut batch,
            &ForwardOptions {
                logits: LogitsMode::Last,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(outs[0].logits.shape(), &[1, v]);
    assert_close("b last", outs[0].logits.data(), r.rows("logits.b", b.len() - 1), 1e-4);
    assert_close("a decode", outs[1].logits.data(), r.rows("logits.a", 79), 1e-4);
}

#[test]
fn routing_replay_reproduces_the_run_and_forced_experts_are_used() {
    let model = Model::load(&fixture(MAIN)).unwrap();
    let r = Reference::load(MAIN);
    let b = &r.ids["ids.b"];
    let rec = full(&model, b);
    let experts = rec.routing.as_ref().unwrap().experts.clone();
    let opts = ForwardOptions {
        logits: LogitsMode::All,
        routing: true,
        ..Default::default()
    };

    let mut st = model.new_state();
    let mut inp = SeqInput::new(b, &mut st);
    inp.forced_experts = Some(&experts);
    let replay = model.forward(&mut [inp], &opts).unwrap().remove(0);
    assert_eq!(
        replay.logits.data(),
        rec.logits.data(),
        "replaying the recorded routing must be exact"
    );

    // Force the *second* choice first and a different expert second: different logits, and the
    // routing record reports the forced experts.
    let k = model.config().num_experts_per_tok;
    let ne = model.config().num_experts as u32;
    let other: Vec<Vec<u32>> = experts
        .iter()
        .map(|l| {
            l.chunks(k)
                .flat_map(|t| {
                    let mut x = (t[0] + 1) % ne;
                    while t.contains(&x) {
                        x = (x + 1) % ne;
                    }
                    vec![t[1], x]
                })
                .collect()
        })
        .collect();
    let mut st = model.new_state();
    let mut inp = SeqInput::new(b, &mut st);
    inp.forced_experts = Some(&other);
    let forced = model.forward(&mut [inp], &opts).unwrap().remove(0);
    assert_eq!(forced.routing.unwrap().experts, other);
    assert!(max_abs_err(forced.logits.data(), rec.logits.data()) > 1e-3);
}

#[test]
fn tied_head_uses_the_embedding() {
    // The same checkpoint twice: (1) tie_word_embeddings=true, no lm_head tensor; (2) untied with
    // lm_head.weight = a copy of the embedding. Both must give identical logits.
    use safetensors::tensor::TensorView;
    let bytes = std::fs::read(fixture(MAIN).join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(MAIN).join("config.json")).unwrap()).unwrap();
    let write = |dir: &std::path::Path, cfg: &serde_json::Value, with_head: bool| {
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
        let mut views: Vec<(String, TensorView<'_>)> = st
            .iter()
            .filter(|(n, _)| *n != "lm_head.weight")
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        if with_head {
            views.push(("lm_head.weight".into(), st.tensor("model.embed_tokens.weight").unwrap()));
        }
        safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    };
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(d2.path(), &cfg, true);
    cfg["tie_word_embeddings"] = true.into();
    write(d1.path(), &cfg, false);
    let ids = [5u32, 17, 900, 3, 3, 42];
    let (m1, m2) = (Model::load(d1.path()).unwrap(), Model::load(d2.path()).unwrap());
    let (o1, o2) = (full(&m1, &ids), full(&m2, &ids));
    assert_eq!(o1.logits.data(), o2.logits.data());
    let orig = full(&Model::load(&fixture(MAIN)).unwrap(), &ids);
    assert!(
        max_abs_err(o1.logits.data(), orig.logits.data()) > 1e-2,
        "tied head must not be the untied one"
    );
}

#[test]
fn bad_inputs_are_typed_errors() {
    let model = Model::load(&fixture(MAIN)).unwrap();
    let other = Model::load(&fixture("tiny-qwen35-b")).unwrap();
    let mut st = model.new_state();
    let e = model
        .forward(&mut [SeqInput::new(&[1, 5000], &mut st)], &opts_all())
        .unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::TokenOutOfRange {
                token: 5000,
                vocab: 1024
            }
        ),
        "{e}"
    );
    assert_eq!(st.len(), 0, "a rejected batch must not touch the state");
    let e = model
        .forward(&mut [SeqInput::new(&[], &mut st)], &opts_all())
        .unwrap_err();
    assert!(matches!(e, ModelError::BadInput(_)), "{e}");
    let mut foreign = other.new_state();
    let e = model
        .forward(&mut [SeqInput::new(&[1], &mut foreign)], &opts_all())
        .unwrap_err();
    assert!(e.to_string().contains("not from this model"), "{e}");
    let bad = vec![vec![0u32; 3]; 4];
    let mut inp = SeqInput::new(&[1, 2], &mut st);
    inp.forced_experts = Some(&bad);
    assert!(matches!(
        model.forward(&mut [inp], &opts_all()),
        Err(ModelError::BadInput(_))
    ));
}

#[test]
fn logits_cli_prints_reference_logits() {
    let r = Reference::load(MAIN);
    let ids: Vec<String> = r.ids["ids.a"][..12].iter().map(|i| i.to_string()).collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["logits", "--model"])
        .arg(fixture(MAIN))
        .args(["--ids", &ids.join(","), "--decode-after", "8"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["logits"].as_array().unwrap();
    assert_eq!(rows.len(), 12);
    // Position i of a prefix run equals position i of the full 80-token reference (causal).
    let got: Vec<f32> = rows
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32))
        .collect();
    assert_close("cli logits", &got, &r.t("logits.a")[..12 * 1024], 1e-4);

    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["logits", "--model"])
        .arg(fixture(MAIN))
        .args(["--ids", "1,x"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a token id"));
}
