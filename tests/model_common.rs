//! Shared helpers for the model tests: fixture paths, reading `reference.safetensors`, and
//! max-abs-error comparison. Included with `#[path]` by the model test files.
#![allow(dead_code)]

use execcritic::model::{ForwardOptions, LogitsMode, Model, SeqInput, SeqOutput, SeqState};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::PathBuf;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("models")
        .join(name)
}

/// The reference tensors of a fixture: f32 tensors as (shape, data), ids as u32.
pub struct Reference {
    pub f32s: HashMap<String, (Vec<usize>, Vec<f32>)>,
    pub ids: HashMap<String, Vec<u32>>,
    pub meta: serde_json::Value,
}

impl Reference {
    pub fn load(name: &str) -> Self {
        let dir = fixture(name);
        let bytes = std::fs::read(dir.join("reference.safetensors")).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let mut f32s = HashMap::new();
        let mut ids = HashMap::new();
        for (n, v) in st.iter() {
            match v.dtype() {
                Dtype::F32 => {
                    let d = v
                        .data()
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect();
                    f32s.insert(n.to_string(), (v.shape().to_vec(), d));
                }
                Dtype::I64 => {
                    let d = v
                        .data()
                        .chunks_exact(8)
                        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
                        .collect();
                    ids.insert(n.to_string(), d);
                }
                d => panic!("unexpected dtype {d:?} for {n}"),
            }
        }
        let meta = serde_json::from_str(
            &std::fs::read_to_string(dir.join("reference_meta.json")).unwrap(),
        )
        .unwrap();
        Reference { f32s, ids, meta }
    }

    pub fn t(&self, name: &str) -> &[f32] {
        &self
            .f32s
            .get(name)
            .unwrap_or_else(|| panic!("reference has no {name}"))
            .1
    }

    pub fn rows(&self, name: &str, from: usize) -> &[f32] {
        let (shape, d) = &self.f32s[name];
        &d[from * shape[1]..]
    }
}

pub fn max_abs_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    let e = max_abs_err(got, want);
    eprintln!("{what}: max abs err {e:.3e}");
    assert!(e <= tol, "{what}: max abs err {e:e} > {tol:e}");
}

/// Run `ids` through `state` in chunks of the given lengths (all logits of every chunk).
pub fn run_chunks(model: &Model, state: &mut SeqState, ids: &[u32], chunks: &[usize]) -> Vec<f32> {
    let mut pos = 0;
    let mut out = Vec::new();
    for &c in chunks {
        let mut b = [SeqInput::new(&ids[pos..pos + c], state)];
        let o = model
            .forward(
                &mut b,
                &ForwardOptions {
                    logits: LogitsMode::All,
                    ..Default::default()
                },
            )
            .unwrap();
        out.extend_from_slice(o[0].logits.data());
        pos += c;
    }
    out
}

pub fn full(model: &Model, ids: &[u32]) -> SeqOutput {
    let mut st = model.new_state();
    let mut b = [SeqInput::new(ids, &mut st)];
    let opts = ForwardOptions {
        logits: LogitsMode::All,
        hidden_states: true,
        routing: true,
    };
    model.forward(&mut b, &opts).unwrap().remove(0)
}

/// HF's top-k (descending probability) from reference router logits `[T, E]`.
pub fn topk_from_logits(logits: &[f32], e: usize, k: usize) -> Vec<u32> {
    logits
        .chunks_exact(e)
        .flat_map(|row| {
            let mut idx: Vec<u32> = (0..e as u32).collect();
            idx.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]));
            idx.truncate(k);
            idx
        })
        .collect()
}
