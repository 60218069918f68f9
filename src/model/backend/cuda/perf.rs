//! The performance model of the CUDA forward: for every launch of a decode step, a prefill and a
//! MoE layer (the kernels of `kernels/*.cu` and the cuBLAS GEMMs, in the order the model's CUDA
//! backend enqueues them), the bytes it must move to and from device memory and the FLOPs it
//! must do, as functions of the shapes; and the roofline time those imply on a device
//! ([`H200`]: dense BF16 tensor peak and HBM bandwidth, /work/shared/reference/
//! performance-anchors.md). A measured time is read as a fraction of that limit
//! (`limit_s / measured_s`); the GPU benchmark prints it, docs/cuda.md tabulates it.
//!
//! Bytes count each operand once (weights read once per step, activations read and written
//! once, L2 reuse assumed perfect within a launch); FLOPs count multiply-adds as 2. A launch's
//! limit is `max(bytes / bandwidth, flops / peak)`; a step's limit is the sum over its launches
//! (they run one after another on one stream). Launch overhead is not in the limit: the launch
//! counts are reported beside it, and `launches` here equals what [`crate::tensor::cuda::Gpu::op_counts`]
//! measures for the same step (checked on the emulator by tests/cuda_model.rs).

use crate::model::config::{GdnDims, LayerType, ModelConfig};
use crate::tensor::cuda::ops::{decode_splits, DECODE_MAX_SPLITS};

/// A device's limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Roofline {
    pub name: &'static str,
    /// Dense tensor-core FLOP/s at the storage type (bf16).
    pub flops_s: f64,
    /// Device-memory bytes/s.
    pub bytes_s: f64,
}

/// One H200: dense BF16 989 TFLOP/s (the 1,979 of spec sheets is 2:4 sparse), HBM3e 4.8 TB/s.
pub const H200: Roofline = Roofline {
    name: "H200 (989 TFLOP/s dense BF16, 4.8 TB/s HBM3e)",
    flops_s: 989e12,
    bytes_s: 4.8e12,
};

/// What one kind of launch costs (`launches` identical launches summed).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCost {
    /// The kernel's name in `kernels/*.cu`, or `gemm:<what>` for a cuBLAS GEMM.
    pub kernel: String,
    pub launches: u64,
    pub bytes: f64,
    pub flops: f64,
}

impl KernelCost {
    fn new(kernel: &str, bytes: f64, flops: f64) -> KernelCost {
        KernelCost {
            kernel: kernel.to_string(),
            launches: 1,
            bytes,
            flops,
        }
    }
    /// A cuBLAS GEMM (counted apart from kernel launches by [`crate::tensor::cuda::Gpu::op_counts`]).
    pub fn is_gemm(&self) -> bool {
        self.kernel.starts_with("gemm:")
    }
    /// The roofline time of these launches on `hw`.
    pub fn limit_s(&self, hw: &Roofline) -> f64 {
        (self.bytes / hw.bytes_s).max(self.flops / hw.flops_s)
    }
}

/// Bytes and FLOPs of `out[m, n] = x[m, k] · w[n, k]ᵀ`: inputs of `a` bytes per element, output
/// of `o` bytes.
pub fn gemm(what: &str, m: usize, n: usize, k: usize, a: usize, o: usize) -> KernelCost {
    let (m, n, k) = (m as f64, n as f64, k as f64);
    KernelCost::new(
        &format!("gemm:{what}"),
        (m * k + n * k) * a as f64 + m * n * o as f64,
        2.0 * m * n * k,
    )
}

/// Expected number of distinct experts `tokens` tokens route to (top-`k` of `e`, uniform).
pub fn experts_touched(tokens: usize, e: usize, k: usize) -> f64 {
    if tokens == 0 || e == 0 {
        return 0.0;
    }
    let e = e as f64;
    e * (1.0 - (1.0 - k as f64 / e).powi(tokens as i32))
}

/// The grouped expert GEMM over `rows` routed rows (`gather`ed or grouped) times `[n, kd]`
/// weights of `experts` distinct experts: each touched expert's weights are read once.
pub fn grouped_gemm(
    kernel: &str,
    rows: usize,
    experts: f64,
    n: usize,
    kd: usize,
    a: usize,
) -> KernelCost {
    let (r, n, kd, a) = (rows as f64, n as f64, kd as f64, a as f64);
    KernelCost::new(
        kernel,
        experts * n * kd * a + r * kd * a + r * n * a,
        2.0 * r * n * kd,
    )
}

/// `gdn_recurrent`: each fp32 state element read once and written once (8 bytes), plus q̂, k̂, v
/// (fp32) and the output; per element 3 multiply-adds in the read pass and 1 in the write pass.
pub fn gdn_recurrent(b: usize, hk: usize, hv: usize, dk: usize, dv: usize, a: usize) -> KernelCost {
    let (b, hk, hv, dk, dv) = (b as f64, hk as f64, hv as f64, dk as f64, dv as f64);
    let state = b * hv * dk * dv;
    KernelCost::new(
        "gdn_recurrent",
        state * 8.0 + b * (2.0 * hk * dk + hv * dv) * 4.0 + b * hv * 8.0 + b * hv * dv * a as f64,
        state * 8.0,
    )
}

/// The chunk-parallel chunked delta rule over `t` tokens of `b` sequences, chunks of 64 (the
/// form the model's CUDA backend runs: its scratch holds every chunk). `gdn_chunk_prep`, per
/// chunk of `c` tokens and value head: the intra-chunk products (A, Pm: c²·dk each) and the two
/// triangular solves (c²·(dk+dv)/2); reads q̂, k̂, v and the gates once, writes U, W, Pm
/// (c·(dk+dv+c) fp32). `gdn_chunk_state`: Vn = U − W·S and the output (2·c·dk·dv), the state
/// update (c·dk·dv); reads q̂, k̂, the gates and the scratch once, the state read and written
/// once per chunk, the output written once.
pub fn gdn_chunked(
    b: usize,
    t: usize,
    hk: usize,
    hv: usize,
    dk: usize,
    dv: usize,
    a: usize,
) -> [KernelCost; 2] {
    let chunks = t.div_ceil(64).max(b) as f64;
    let c = (t as f64 / chunks).min(64.0);
    let (t, hk, hv, dk, dv) = (t as f64, hk as f64, hv as f64, dk as f64, dv as f64);
    let qk = t * 2.0 * hk * dk * 4.0;
    let gates = t * 2.0 * hv * 4.0;
    let scratch = chunks * hv * c * (dk + dv + c) * 4.0;
    let prep_flops = 2.0 * chunks * hv * (2.0 * c * c * dk + c * c * (dk + dv) / 2.0);
    let state_flops = 2.0 * chunks * hv * 3.0 * c * dk * dv;
    [
        KernelCost::new(
            "gdn_chunk_prep",
            qk + t * hv * dv * 4.0 + gates + scratch,
            prep_flops,
        ),
        KernelCost::new(
            "gdn_chunk_state",
            qk + gates + scratch + chunks * hv * dk * dv * 8.0 + t * hv * dv * a as f64,
            state_flops,
        ),
    ]
}

/// Which kind of step to model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `batch` sequences, one token each, `context` tokens already cached per sequence.
    Decode { batch: usize, context: usize },
    /// One sequence of `tokens` tokens (logits of its last row only).
    Prefill { tokens: usize },
}

/// Every launch of one forward step of `cfg` (storage type of `a` bytes), in the backend's order
/// (`model::backend::cuda`), with logits for the last row of each sequence.
pub fn step(cfg: &ModelConfig, s: Step, a: usize) -> Vec<KernelCost> {
    let c = cfg;
    let (b, t) = match s {
        Step::Decode { batch, .. } => (batch, batch),
        Step::Prefill { tokens } => (1, tokens),
    };
    let (tf, h) = (t as f64, c.hidden_size);
    let af = a as f64;
    let mut out = vec![KernelCost::new("embedding", 2.0 * tf * h as f64 * af, 0.0)];
    let norm = |rows: usize, d: usize, delta: bool| {
        let (rows, d) = (rows as f64, d as f64);
        let rw = if delta { 4.0 } else { 2.0 };
        KernelCost::new("add_rms_norm_1p", rows * d * af * rw + d * af, 5.0 * rows * d)
    };
    for (li, lt) in c.layer_types.iter().enumerate() {
        out.push(norm(t, h, li > 0));
        match lt {
            LayerType::Full => out.extend(attention(c, s, a)),
            LayerType::Linear => out.extend(gdn(c, b, t, matches!(s, Step::Decode { .. }), a)),
        }
        out.push(norm(t, h, true));
        out.extend(moe_layer(c, t, a));
    }
    out.push(norm(t, h, true));
    out.push(KernelCost::new("gather_rows", 2.0 * b as f64 * h as f64 * af, 0.0));
    out.push(gemm("lm_head", b, c.vocab_size, h, a, 4));
    out
}

/// The launches of one gated-attention layer.
fn attention(c: &ModelConfig, s: Step, a: usize) -> Vec<KernelCost> {
    let (hq, hkv, hd, h) = (
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.hidden_size,
    );
    let (t, ctx, decode) = match s {
        Step::Decode { batch, context } => (batch, context + 1, true),
        Step::Prefill { tokens } => (tokens, tokens, false),
    };
    let (tf, af) = (t as f64, a as f64);
    let q = tf * (hq * hd) as f64;
    let kv = tf * (hkv * hd) as f64;
    let mut v = vec![
        gemm("attn_q_gate", t, 2 * hq * hd, h, a, a),
        KernelCost::new("split_q_gate", 4.0 * q * af, 0.0),
        gemm("attn_k", t, hkv * hd, h, a, a),
        gemm("attn_v", t, hkv * hd, h, a, a),
        KernelCost::new("head_rms_norm_1p", 2.0 * q * af, 5.0 * q),
        KernelCost::new("head_rms_norm_1p", 2.0 * kv * af, 5.0 * kv),
        KernelCost::new("rope_partial", 2.0 * q * af, 6.0 * q),
        KernelCost::new("rope_partial", 2.0 * kv * af, 6.0 * kv),
        KernelCost::new("kv_append", 4.0 * kv * af, 0.0),
    ];
    // keys/values read once per KV head and sequence (GQA: shared by its query heads, staged in
    // shared memory for the group); scores and the weighted sum: 2·hd multiply-adds per (query
    // head, key). Decode: `splits` partial results (fp32 acc + max + sum per head) written by
    // the split kernel and read by the combine.
    if decode {
        let keys = tf * ctx as f64;
        let splits = decode_splits(ctx, DECODE_MAX_SPLITS) as f64;
        let part = q * splits * 4.0 + tf * (hq as f64) * splits * 8.0;
        v.push(KernelCost::new(
            "attn_decode_split",
            keys * (2 * hkv * hd) as f64 * af + q * af + part,
            keys * (4 * hq * hd) as f64,
        ));
        v.push(KernelCost::new("attn_decode_combine", part + q * af, 0.0));
    } else {
        // the prefill kernel stages each K/V tile once per 16-query tile and head: re-reads
        // from L2, not device memory (the model's assumption of perfect L2 reuse in a launch)
        let pairs = tf * (tf + 1.0) / 2.0;
        v.push(KernelCost::new(
            "attn_prefill",
            kv * 2.0 * af + 2.0 * q * af,
            pairs * (4 * hq * hd) as f64,
        ));
    }
    v.push(KernelCost::new("sigmoid_gate_mul", 3.0 * q * af, 4.0 * q));
    v.push(gemm("attn_o", t, h, hq * hd, a, a));
    v
}

/// The launches of one Gated DeltaNet layer (`decode`: recurrent, else chunked).
fn gdn(c: &ModelConfig, b: usize, t: usize, decode: bool, a: usize) -> Vec<KernelCost> {
    let GdnDims { hk, hv, dk, dv, conv: cd, value: vd, kernel: kk } = c.gdn_dims();
    let h = c.hidden_size;
    let (tf, af) = (t as f64, a as f64);
    let conv = (tf * cd as f64, (b * cd * (kk - 1)) as f64);
    let mut v = vec![
        gemm("gdn_qkv", t, cd, h, a, a),
        gemm("gdn_z", t, vd, h, a, a),
        gemm("gdn_b", t, hv, h, a, a),
        gemm("gdn_a", t, hv, h, a, a),
        KernelCost::new(
            "causal_conv",
            2.0 * conv.0 * af + 8.0 * conv.1 + (cd * kk) as f64 * af,
            2.0 * conv.0 * kk as f64,
        ),
        // with the gates fused in (gdn_qkv_prep_gates)
        KernelCost::new(
            "gdn_qkv_prep",
            conv.0 * af + tf * (2 * hk * dk + hv * dv) as f64 * 4.0 + tf * hv as f64 * (2.0 * af + 8.0),
            4.0 * tf * (hk * dk) as f64 + 10.0 * tf * hv as f64,
        ),
    ];
    if decode {
        v.push(gdn_recurrent(b, hk, hv, dk, dv, a));
    } else {
        v.extend(gdn_chunked(b, t, hk, hv, dk, dv, a));
    }
    let o = tf * vd as f64;
    v.push(KernelCost::new("gated_rms_norm", 3.0 * o * af, 8.0 * o));
    v.push(gemm("gdn_out", t, h, vd, a, a));
    v
}

/// The launches of one sparse MoE layer over `t` tokens: router, route + count, scan / tile list
/// / scatter, the two grouped expert GEMMs with SwiGLU between, the shared expert and its gate,
/// the weighted combine.
pub fn moe_layer(c: &ModelConfig, t: usize, a: usize) -> Vec<KernelCost> {
    let (h, e, k, i, is) = (
        c.hidden_size,
        c.num_experts,
        c.num_experts_per_tok,
        c.moe_intermediate_size,
        c.shared_expert_intermediate_size,
    );
    let (tf, af) = (t as f64, a as f64);
    let pairs = t * k;
    let pf = pairs as f64;
    let touched = experts_touched(t, e, k);
    let expert_gemm = if a == 4 {
        "grouped_gemm"
    } else if crate::tensor::cuda::ops::moe_tile_rows(pairs, e) <= 16 {
        "grouped_gemm_stream"
    } else {
        "grouped_gemm_mma"
    };
    let mut v = vec![
        gemm("router", t, e, h, a, 4),
        KernelCost::new(
            "router_topk",
            tf * e as f64 * 4.0 + pf * 8.0,
            5.0 * tf * e as f64,
        ),
        KernelCost::new("moe_scan_scatter", pf * 12.0 + e as f64 * 12.0, 0.0),
    ];
    if a == 4 {
        v.push(grouped_gemm(expert_gemm, pairs, touched, 2 * i, h, a));
        v.push(KernelCost::new("swiglu", 3.0 * pf * i as f64 * af, 6.0 * pf * i as f64));
    } else {
        // SwiGLU in the gate|up GEMM's epilogue: [pairs, i] written instead of [pairs, 2i]
        let mut gu = grouped_gemm(expert_gemm, pairs, touched, 2 * i, h, a);
        gu.bytes -= pf * i as f64 * af;
        gu.flops += 6.0 * pf * i as f64;
        v.push(gu);
    }
    v.extend([
        grouped_gemm(expert_gemm, pairs, touched, h, i, a),
        gemm("shared_gate", t, is, h, a, a),
        gemm("shared_up", t, is, h, a, a),
        KernelCost::new("silu_mul", 3.0 * tf * is as f64 * af, 6.0 * tf * is as f64),
        gemm("shared_down", t, h, is, a, a),
        gemm("shared_expert_gate", t, 1, h, a, a),
        KernelCost::new(
            "moe_combine",
            (pf + 2.0 * tf) * h as f64 * af + pf * 8.0,
            2.0 * (pf + 1.0) * h as f64,
        ),
    ]);
    v
}

/// Totals of a list of launches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Totals {
    /// Kernel launches (without GEMMs).
    pub launches: u64,
    /// cuBLAS GEMM calls.
    pub gemms: u64,
    pub bytes: f64,
    pub flops: f64,
    /// Σ over launches of max(bytes / bandwidth, flops / peak).
    pub limit_s: f64,
}

pub fn totals(costs: &[KernelCost], hw: &Roofline) -> Totals {
    let mut t = Totals {
        launches: 0,
        gemms: 0,
        bytes: 0.0,
        flops: 0.0,
        limit_s: 0.0,
    };
    for c in costs {
        if c.is_gemm() {
            t.gemms += c.launches;
        } else {
            t.launches += c.launches;
        }
        t.bytes += c.bytes;
        t.flops += c.flops;
        t.limit_s += c.limit_s(hw);
    }
    t
}

/// The workloads of issue #15's bars: batch-1 decode and 256-way decode (at 1k tokens of
/// context), a 4k-token prefill, the MoE layer at 4,096 tokens; per workload the roofline limit
/// in the unit the benchmark reports (tokens/s, or seconds for the MoE layer).
pub fn workloads(cfg: &ModelConfig, hw: &Roofline) -> Vec<(&'static str, Totals, f64)> {
    let dec = |batch| Step::Decode {
        batch,
        context: 1024,
    };
    let d1 = totals(&step(cfg, dec(1), 2), hw);
    let d256 = totals(&step(cfg, dec(256), 2), hw);
    let p4k = totals(&step(cfg, Step::Prefill { tokens: 4096 }, 2), hw);
    let moe = totals(&moe_layer(cfg, 4096, 2), hw);
    vec![
        ("batch1_decode_tok_s", d1, 1.0 / d1.limit_s),
        ("decode_256_output_tok_s", d256, 256.0 / d256.limit_s),
        ("prefill_4k_tok_s", p4k, 4096.0 / p4k.limit_s),
        ("moe_layer_4k_s", moe, moe.limit_s),
    ]
}

/// The docs table: per workload, launches + GEMMs, GB moved, GFLOP, the roofline limit, and
/// the bar as a fraction of it.
pub fn markdown_table(cfg: &ModelConfig, hw: &Roofline) -> String {
    let bars = [150.0, 5000.0, 20000.0, f64::NAN];
    let mut s = String::from(
        "| workload | launches + GEMMs | GB moved | GFLOP | roofline limit | issue bar (share of limit) |\n|---|---|---|---|---|---|\n",
    );
    for ((name, t, lim), bar) in workloads(cfg, hw).into_iter().zip(bars) {
        let (limit, bar) = if name == "moe_layer_4k_s" {
            (
                format!("{:.3} ms", lim * 1e3),
                "25 % of BF16 peak".to_string(),
            )
        } else {
            (
                format!("{lim:.0} tok/s"),
                format!("{bar:.0} tok/s ({:.0} %)", 100.0 * bar / lim),
            )
        };
        s.push_str(&format!(
            "| {name} | {} + {} | {:.2} | {:.1} | {limit} | {bar} |\n",
            t.launches,
            t.gemms,
            t.bytes / 1e9,
            t.flops / 1e9
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a3b() -> ModelConfig {
        let v = crate::model::layout::qwen35_35b_a3b_config();
        ModelConfig::from_json_str(&v.to_string(), std::path::Path::new("a3b")).unwrap()
    }

    #[test]
    fn gemm_counts_operands_once_and_two_flops_per_multiply_add() {
        // 2x4 · (3x4)ᵀ in bf16 with an f32 output: (8 + 12)·2 + 6·4 bytes, 2·2·3·4 FLOPs
        let g = gemm("x", 2, 3, 4, 2, 4);
        assert_eq!((g.bytes, g.flops), (64.0, 48.0));
        assert!(g.is_gemm());
        // bandwidth-bound on the H200: 64 B / 4.8e12 B/s
        assert_eq!(g.limit_s(&H200), 64.0 / 4.8e12);
        let big = gemm("y", 8192, 8192, 8192, 2, 2);
        assert_eq!(big.limit_s(&H200), 2.0 * 8192f64.powi(3) / 989e12);
    }

    #[test]
    fn recurrent_gdn_moves_each_state_element_once_each_way() {
        // b=1, hk=1, hv=2, dk=dv=4: state 32 floats × 8 B, q̂/k̂ 8 + v 8 floats × 4 B, β/g
        // 2 × 8 B, bf16 output 8 × 2 B
        let c = gdn_recurrent(1, 1, 2, 4, 4, 2);
        assert_eq!(c.bytes, 256.0 + 64.0 + 16.0 + 16.0);
        assert_eq!(c.flops, 256.0);
    }

    #[test]
    fn experts_touched_is_exact_at_the_ends() {
        assert_eq!(experts_touched(0, 256, 8), 0.0);
        assert!((experts_touched(1, 256, 8) - 8.0).abs() < 1e-9);
        // every expert chosen: k = e
        assert!((experts_touched(3, 4, 4) - 4.0).abs() < 1e-12);
        let e256 = experts_touched(256, 256, 8);
        assert!(e256 > 255.9 && e256 < 256.0, "{e256}");
    }

    #[test]
    fn grouped_gemm_reads_touched_experts_once() {
        // 3 rows over 2 experts of [4, 5] bf16 weights: 2·20·2 + 3·5·2 + 3·4·2 bytes
        let c = grouped_gemm("k", 3, 2.0, 4, 5, 2);
        assert_eq!((c.bytes, c.flops), (80.0 + 30.0 + 24.0, 2.0 * 3.0 * 4.0 * 5.0));
    }

    #[test]
    fn a3b_decode_reads_the_active_weights_of_the_reference_anchors() {
        // performance-anchors.md: ≈ 2.95 B params (5.9 GB) per batch-1 token; at a large batch
        // every expert is touched: 40 layers × 256 experts × 3·2048·512 bf16 = 64.4 GB
        let cfg = a3b();
        let d1 = totals(&step(&cfg, Step::Decode { batch: 1, context: 0 }, 2), &H200);
        assert!((d1.bytes / 5.9e9 - 1.0).abs() < 0.05, "{}", d1.bytes);
        let d = step(&cfg, Step::Decode { batch: 256, context: 0 }, 2);
        let experts: f64 = d
            .iter()
            .filter(|c| c.kernel.starts_with("grouped_gemm"))
            .map(|c| c.bytes)
            .sum();
        assert!((experts / 64.4e9 - 1.0).abs() < 0.02, "{experts}");
        // and 256 sequences' fp32 GDN states (≈ 63 MB each) read and written once
        let state: f64 = d
            .iter()
            .filter(|c| c.kernel == "gdn_recurrent")
            .map(|c| c.bytes)
            .sum();
        assert!((state / (2.0 * 256.0 * 30.0 * 32.0 * 128.0 * 128.0 * 4.0) - 1.0).abs() < 0.01);
        // ≈ 6 GFLOP per token (2 per active parameter + attention); a prefill runs the 1 GFLOP
        // LM head (0.51 B params) on its last row only
        let p = totals(&step(&cfg, Step::Prefill { tokens: 4096 }, 2), &H200);
        let per_tok = p.flops / 4096.0;
        assert!(per_tok > 4.8e9 && per_tok < 6.5e9, "{per_tok}");
    }

    #[test]
    fn launch_counts_follow_the_layer_mix() {
        // per step: embedding, per layer 2 norms + mixer + MoE (6 kernels, 5 GEMMs), final
        // norm, gather_rows, head GEMM; attention decode 9 kernels + 4 GEMMs, GDN 4 + 5;
        // a prefill: one attention kernel fewer (no combine), one GDN kernel more (the
        // chunk-parallel delta rule is two launches)
        let cfg = a3b();
        let t = totals(&step(&cfg, Step::Decode { batch: 1, context: 7 }, 2), &H200);
        let (full, lin) = (10u64, 30u64);
        assert_eq!(t.launches, 1 + 40 * (2 + 6) + full * 9 + lin * 4 + 2);
        assert_eq!(t.gemms, 40 * 5 + full * 4 + lin * 5 + 1);
        let p = totals(&step(&cfg, Step::Prefill { tokens: 100 }, 2), &H200);
        assert_eq!(p.launches, t.launches - full + lin);
    }

    #[test]
    fn decode_splits_follow_the_context_and_their_partials_are_counted() {
        use crate::tensor::cuda::ops::{attn_shared_bytes, attn_tile_keys};
        // one split per 256 keys, capped by the scratch and by 64
        assert_eq!(decode_splits(1, 64), 1);
        assert_eq!(decode_splits(256, 64), 1);
        assert_eq!(decode_splits(257, 64), 2);
        assert_eq!(decode_splits(32768, 64), 64);
        assert_eq!(decode_splits(32768, 3), 3);
        // staged K/V tiles within 48 KiB: bf16 hd 256 stages 32 keys, f32 hd 256 only 8
        assert_eq!(attn_tile_keys(256, 2), 32);
        assert_eq!(attn_tile_keys(256, 4), 8);
        assert_eq!(attn_shared_bytes(256, 4, 8), (16 + 16) * 257 * 4);
        assert!(attn_shared_bytes(256, 4, 16) > 48 * 1024);
        // 35B-A3B batch-1 decode at 1,024 keys + the new one: 5 splits of 16 heads, fp32
        // partials (256 values + max + sum) written by the split kernel, read by the combine
        let d = step(&a3b(), Step::Decode { batch: 1, context: 1024 }, 2);
        let comb = d.iter().find(|c| c.kernel == "attn_decode_combine").unwrap();
        assert_eq!(comb.bytes, (16 * 5 * (256 * 4 + 8) + 16 * 256 * 2) as f64);
    }

    #[test]
    fn the_docs_table_covers_the_four_bars() {
        let cfg = a3b();
        let tab = markdown_table(&cfg, &H200);
        println!("{tab}");
        for w in ["batch1_decode_tok_s", "decode_256_output_tok_s", "prefill_4k_tok_s", "moe_layer_4k_s"] {
            assert!(tab.contains(w), "{w}");
        }
        let w = workloads(&cfg, &H200);
        // batch-1 decode is bandwidth-bound: the limit is bytes / bandwidth
        assert!((w[0].2 - 4.8e12 / w[0].1.bytes).abs() / w[0].2 < 0.05);
    }
}
