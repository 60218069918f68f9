//! Launch wrappers, one per kernel in `kernels/*.cu`, in the order of the forward pass. Each
//! checks the buffer sizes it is given (a bad size is a [`DeviceError::Shape`], never an
//! out-of-bounds launch) and enqueues the kernel on the device's stream without synchronising.
//! Written once over [`Gpu`]: the same wrappers drive the real GPU and the emulator. Wrappers are
//! generic over the storage type [`Act`] of activations and weights, which picks the kernel's
//! `_bf16` or `_f32` entry point; kernels without activations use their `_f32` build.
//! Sequence batches are packed: `cu` holds B+1 token offsets, `slots` the per-sequence cache slot.
#![allow(clippy::too_many_arguments)] // wrappers mirror the kernels' argument lists

use super::gpu::{Act, Arg, DeviceBuffer, Gpu};
use crate::tensor::device::{DeviceError, LaunchDims, Result};

type F32 = DeviceBuffer<f32>;
type I32 = DeviceBuffer<i32>;

pub(super) fn need(op: &'static str, ok: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(DeviceError::Shape { op, msg: msg() })
    }
}

pub(super) fn cfg(grid: (usize, usize, usize), block: usize, shmem: usize) -> LaunchDims {
    LaunchDims {
        grid: (
            grid.0.max(1) as u32,
            grid.1.max(1) as u32,
            grid.2.max(1) as u32,
        ),
        block: (block as u32, 1, 1),
        shared_bytes: shmem as u32,
    }
}

/// Grid for a grid-stride elementwise kernel over `n` items.
pub(super) fn stride_cfg(n: usize) -> LaunchDims {
    cfg((n.div_ceil(256).min(65535), 1, 1), 256, 0)
}

/// `launch!(gpu, kernel_name, dims, args...)`: arguments in the kernel's parameter order.
macro_rules! launch {
    ($gpu:expr, $name:expr, $cfg:expr, $($arg:expr),+ $(,)?) => {
        $gpu.launch(&$name, $cfg, &[$(Arg::arg(&$arg)),+])
    };
}
/// The launch macro for the other wrapper modules (`backward`).
pub(super) use launch;

/// The `_f32` build of a kernel that has no activations (identical in both builds).
fn plain(base: &str) -> String {
    <f32 as Act>::kernel(base)
}

// ---------------------------------------------------------------- embedding and norms

/// `out[t] = table[ids[t]]`; `ids` must be validated on the host (a bad id yields NaN rows).
pub fn embedding<A: Act>(
    gpu: &Gpu,
    table: &DeviceBuffer<A>,
    vocab: usize,
    hidden: usize,
    ids: &I32,
    t: usize,
    out: &mut DeviceBuffer<A>,
) -> Result<()> {
    need(
        "embedding",
        table.len() >= vocab * hidden && ids.len() >= t && out.len() >= t * hidden,
        || "sizes".into(),
    )?;
    launch!(
        gpu,
        A::kernel("embedding"),
        cfg((t, 1, 1), 256, 0),
        table,
        ids,
        out,
        &(hidden as i32),
        &(vocab as i32)
    )
}

/// `resid += delta` (if given), then `out = RMSNorm1p(resid; w)` per row.
pub fn add_rms_norm_1p<A: Act>(
    gpu: &Gpu,
    resid: &mut DeviceBuffer<A>,
    delta: Option<&DeviceBuffer<A>>,
    w: &DeviceBuffer<A>,
    out: &mut DeviceBuffer<A>,
    rows: usize,
    d: usize,
    eps: f32,
) -> Result<()> {
    let n = rows * d;
    need(
        "add_rms_norm_1p",
        resid.len() >= n && out.len() >= n && w.len() >= d && delta.is_none_or(|x| x.len() >= n),
        || format!("rows={rows} d={d}"),
    )?;
    launch!(
        gpu,
        A::kernel("add_rms_norm_1p"),
        cfg((rows, 1, 1), 256, 0),
        resid,
        delta,
        w,
        out,
        &(d as i32),
        &eps
    )
}

/// Per-head RMSNorm1p in place (q_norm / k_norm) on `[rows, heads, hd]` with row stride `stride`.
pub fn head_rms_norm_1p<A: Act>(
    gpu: &Gpu,
    x: &mut DeviceBuffer<A>,
    w: &DeviceBuffer<A>,
    rows: usize,
    heads: usize,
    hd: usize,
    stride: usize,
    eps: f32,
) -> Result<()> {
    need(
        "head_rms_norm_1p",
        x.len() >= rows * stride && stride >= heads * hd && w.len() >= hd,
        || "sizes".into(),
    )?;
    launch!(
        gpu,
        A::kernel("head_rms_norm_1p"),
        cfg((rows, heads, 1), 64, 0),
        x,
        w,
        &(hd as i32),
        &(stride as i32),
        &(hd as i32),
        &eps
    )
}

/// GDN output norm over `[t, hv, dv]`: `w·RMSNorm(o)·SiLU(z)`.
pub fn gated_rms_norm<A: Act>(
    gpu: &Gpu,
    o: &DeviceBuffer<A>,
    z: &DeviceBuffer<A>,
    w: &DeviceBuffer<A>,
    out: &mut DeviceBuffer<A>,
    t: usize,
    hv: usize,
    dv: usize,
    eps: f32,
) -> Result<()> {
    let n = t * hv * dv;
    need(
        "gated_rms_norm",
        o.len() >= n && z.len() >= n && out.len() >= n && w.len() >= dv,
        || "sizes".into(),
    )?;
    launch!(
        gpu,
        A::kernel("gated_rms_norm"),
        cfg((t, hv, 1), 128, 0),
        o,
        z,
        w,
        out,
        &(dv as i32),
        &eps
    )
}

/// `dst[r] = src[rows[r]]` for `r < n` rows of width `d`.
pub fn gather_rows<A: Act>(
    gpu: &Gpu,
    src: &DeviceBuffer<A>,
    rows: &I32,
    dst: &mut DeviceBuffer<A>,
    n: usize,
    d: usize,
) -> Result<()> {
    need("gather_rows", rows.len() >= n && dst.len() >= n * d, || {
        "sizes".into()
    })?;
    launch!(
        gpu,
        A::kernel("gather_rows"),
        cfg((n, 1, 1), 256, 0),
        src,
        rows,
        dst,
        &(d as i32)
    )
}

// ---------------------------------------------------------------- gated attention

pub fn split_q_gate<A: Act>(
    gpu: &Gpu,
    qg: &DeviceBuffer<A>,
    q: &mut DeviceBuffer<A>,
    gate: &mut DeviceBuffer<A>,
    t: usize,
    hq: usize,
    hd: usize,
) -> Result<()> {
    let n = t * hq * hd;
    need(
        "split_q_gate",
        qg.len() >= 2 * n && q.len() >= n && gate.len() >= n,
        || "sizes".into(),
    )?;
    launch!(
        gpu,
        A::kernel("split_q_gate"),
        cfg((t, 1, 1), 256, 0),
        qg,
        q,
        gate,
        &(hq as i32),
        &(hd as i32)
    )
}

/// Partial NeoX RoPE in place on `[t, heads, hd]` at positions `pos[t]`.
pub fn rope_partial<A: Act>(
    gpu: &Gpu,
    x: &mut DeviceBuffer<A>,
    pos: &I32,
    t: usize,
    heads: usize,
    hd: usize,
    rot: usize,
    theta: f32,
    round_cs: bool,
) -> Result<()> {
    need(
        "rope_partial",
        x.len() >= t * heads * hd && pos.len() >= t && rot <= hd && rot % 2 == 0 && rot / 2 <= 1024,
        || "sizes".into(),
    )?;
    launch!(
        gpu,
        A::kernel("rope_partial"),
        cfg((t, heads, 1), (rot / 2).div_ceil(32) * 32, 0),
        x,
        pos,
        &(hd as i32),
        &(rot as i32),
        &theta,
        &(round_cs as i32)
    )
}

/// The step's block table: row `r` lists, in token order, the blocks of the `r`-th sequence of
/// the batch (`[rows, stride]` block ids; unused entries point at any valid block).
pub struct BlockTable<'a> {
    pub table: &'a I32,
    pub stride: usize,
}

impl BlockTable<'_> {
    fn rows_ok(&self, rows: usize) -> bool {
        self.stride > 0 && self.table.len() >= rows * self.stride
    }
}

/// Per-token cache geometry for attention: position in the cache and block-table row of each
/// token, and the block table.
pub struct KvIndex<'a> {
    pub cache_pos: &'a I32,
    pub seq_of_tok: &'a I32,
    pub blocks: BlockTable<'a>,
}

/// Paged KV cache of one attention layer: `blocks` blocks of `block_size` tokens, k and v each
/// `[blocks, hkv, block_size, hd]` (a block is contiguous, so one copy moves it). Which block
/// holds which tokens is the host's business (block tables); the pool only stores rows.
pub struct KvPool<A: Act> {
    pub k: DeviceBuffer<A>,
    pub v: DeviceBuffer<A>,
    pub blocks: usize,
    pub block_size: usize,
    pub hkv: usize,
    pub hd: usize,
}

impl<A: Act> KvPool<A> {
    /// Allocate all `blocks` blocks up front.
    pub fn new(
        gpu: &Gpu,
        blocks: usize,
        block_size: usize,
        hkv: usize,
        hd: usize,
    ) -> Result<KvPool<A>> {
        need("KvPool::new", blocks > 0 && block_size > 0, || {
            format!("{blocks} blocks of {block_size} tokens")
        })?;
        let n = blocks * hkv * block_size * hd;
        Ok(KvPool {
            k: gpu.zeros(n)?,
            v: gpu.zeros(n)?,
            blocks,
            block_size,
            hkv,
            hd,
        })
    }

    /// Elements of one block (k or v).
    fn block_len(&self) -> usize {
        self.hkv * self.block_size * self.hd
    }

    /// Make block `to` a device copy of block `from` (copy-on-write of a shared partial block).
    pub fn copy_block(&mut self, gpu: &Gpu, from: usize, to: usize) -> Result<()> {
        need("KvPool::copy_block", from < self.blocks && to < self.blocks, || {
            format!("block {from} to block {to} of {}", self.blocks)
        })?;
        let n = self.block_len();
        gpu.copy_within(&mut self.k, from * n, to * n, n)?;
        gpu.copy_within(&mut self.v, from * n, to * n, n)
    }
}

/// Write the k, v rows of `t` packed tokens into their blocks (through `idx`'s block table).
pub fn kv_append<A: Act>(
    gpu: &Gpu,
    k: &DeviceBuffer<A>,
    v: &DeviceBuffer<A>,
    pool: &mut KvPool<A>,
    idx: &KvIndex<'_>,
    t: usize,
) -> Result<()> {
    let n = t * pool.hkv * pool.hd;
    need(
        "kv_append",
        k.len() >= n
            && v.len() >= n
            && idx.cache_pos.len() >= t
            && idx.seq_of_tok.len() >= t
            && idx.blocks.rows_ok(1),
        || "sizes".into(),
    )?;
    launch!(
        gpu,
        A::kernel("kv_append"),
        cfg((t, 1, 1), 256, 0),
        k,
        v,
        &mut pool.k,
        &mut pool.v,
        idx.cache_pos,
        idx.seq_of_tok,
        idx.blocks.table,
        &(idx.blocks.stride as i32),
        &(pool.hkv as i32),
        &(pool.hd as i32),
        &(pool.block_size as i32),
        &(pool.blocks as i32)
    )
}

/// Query rows per block of the tiled attention kernels (`ATT_QT` in kernels/attention.cu).
pub const ATT_QUERY_TILE: usize = 16;
/// Dynamic shared memory the attention kernels may use (the default limit without opt-in).
const ATT_SHARED_LIMIT: usize = 48 * 1024;

/// Bytes of dynamic shared memory of `attn_prefill` / `attn_decode_split` staging `kt` keys of
/// head dim `hd` in elements of `elem` bytes: the query tile and the K and V tiles, rows padded
/// to an odd number of 32-bit words (`ATT_LD`).
pub fn attn_shared_bytes(hd: usize, elem: usize, kt: usize) -> usize {
    let ld = hd + if elem == 2 { 2 } else { 1 };
    (ATT_QUERY_TILE + 2 * kt) * ld * elem
}

/// Keys staged per shared-memory tile by the attention kernels: the most of 32, 16, 8 (one per
/// lane at 32) whose tiles fit the 48 KiB limit (`hd` <= 256 always fits 8).
pub fn attn_tile_keys(hd: usize, elem: usize) -> usize {
    [32, 16, 8]
        .into_iter()
        .find(|&kt| attn_shared_bytes(hd, elem, kt) <= ATT_SHARED_LIMIT)
        .unwrap_or(8)
}

/// Prefill attention of `t` packed query tokens over their sequences' caches (causal by position).
pub fn attn_prefill<A: Act>(
    gpu: &Gpu,
    q: &DeviceBuffer<A>,
    pool: &KvPool<A>,
    idx: &KvIndex<'_>,
    out: &mut DeviceBuffer<A>,
    t: usize,
    hq: usize,
) -> Result<()> {
    let hd = pool.hd;
    need(
        "attn_prefill",
        hd <= 256
            && hq % pool.hkv == 0
            && q.len() >= t * hq * hd
            && out.len() >= t * hq * hd
            && idx.cache_pos.len() >= t
            && idx.seq_of_tok.len() >= t
            && idx.blocks.rows_ok(1),
        || format!("hd={hd} hq={hq}"),
    )?;
    let scale = 1.0 / (hd as f32).sqrt();
    let elem = std::mem::size_of::<A>();
    let kt = attn_tile_keys(hd, elem);
    launch!(
        gpu,
        A::kernel("attn_prefill"),
        cfg(
            (t.div_ceil(ATT_QUERY_TILE), hq, 1),
            128,
            attn_shared_bytes(hd, elem, kt)
        ),
        q,
        &pool.k,
        &pool.v,
        out,
        idx.cache_pos,
        idx.seq_of_tok,
        idx.blocks.table,
        &(idx.blocks.stride as i32),
        &(hq as i32),
        &(pool.hkv as i32),
        &(hd as i32),
        &(pool.block_size as i32),
        &scale,
        &(t as i32),
        &(kt as i32)
    )
}

/// Keys per split of split-KV decode: a split shorter than this is not worth its partial result.
pub const DECODE_KEYS_PER_SPLIT: usize = 256;
/// The most splits of one decode step.
pub const DECODE_MAX_SPLITS: usize = 64;

/// Splits of a decode step whose longest context is `max_len` keys: one per
/// [`DECODE_KEYS_PER_SPLIT`] keys (1 for short contexts, more for long ones), at most `cap` (what
/// the scratch holds for the batch) and [`DECODE_MAX_SPLITS`].
pub fn decode_splits(max_len: usize, cap: usize) -> usize {
    max_len
        .div_ceil(DECODE_KEYS_PER_SPLIT)
        .min(cap)
        .min(DECODE_MAX_SPLITS)
        .max(1)
}

/// Scratch for split-KV decode: room for `max_batch × hq × nsplit` partial results; a step of
/// `b` sequences may use up to `max_batch × nsplit / b` splits ([`decode_splits`]).
pub struct DecodeScratch {
    pub acc: F32,
    pub ml: F32,
    pub nsplit: usize,
}

impl DecodeScratch {
    pub fn new(
        gpu: &Gpu,
        max_batch: usize,
        hq: usize,
        hd: usize,
        nsplit: usize,
    ) -> Result<DecodeScratch> {
        Ok(DecodeScratch {
            acc: gpu.zeros(max_batch * hq * nsplit * hd)?,
            ml: gpu.zeros(max_batch * hq * nsplit * 2)?,
            nsplit,
        })
    }

    /// The most splits this scratch holds for `b` sequences of `hq` heads of dim `hd`.
    pub fn splits_for(&self, b: usize, hq: usize, hd: usize) -> usize {
        let per = (b * hq).max(1);
        (self.acc.len() / (per * hd.max(1))).min(self.ml.len() / (per * 2))
    }
}

/// Decode attention, one token per sequence: `lens[b]` visible keys read through row `b` of the
/// block table, `max_len_now` the longest, which sets the split count ([`decode_splits`]).
pub fn attn_decode<A: Act>(
    gpu: &Gpu,
    q: &DeviceBuffer<A>,
    pool: &KvPool<A>,
    lens: &I32,
    blocks: &BlockTable<'_>,
    b: usize,
    hq: usize,
    max_len_now: usize,
    sc: &mut DecodeScratch,
    out: &mut DeviceBuffer<A>,
) -> Result<()> {
    let hd = pool.hd;
    let grp = hq / pool.hkv.max(1);
    let cap = sc.splits_for(b, hq, hd);
    need(
        "attn_decode",
        hd <= 256
            && hq % pool.hkv == 0
            && grp <= ATT_QUERY_TILE
            && q.len() >= b * hq * hd
            && out.len() >= b * hq * hd
            && lens.len() >= b
            && blocks.rows_ok(b)
            && max_len_now <= blocks.stride * pool.block_size
            && cap >= 1,
        || format!("hd={hd} hq={hq} b={b}"),
    )?;
    let nsplit = decode_splits(max_len_now, cap);
    let split_len = max_len_now.div_ceil(nsplit).max(1);
    let scale = 1.0 / (hd as f32).sqrt();
    let elem = std::mem::size_of::<A>();
    let kt = attn_tile_keys(hd, elem);
    launch!(
        gpu,
        A::kernel("attn_decode_split"),
        cfg((b, pool.hkv, nsplit), 128, attn_shared_bytes(hd, elem, kt)),
        q,
        &pool.k,
        &pool.v,
        lens,
        blocks.table,
        &(blocks.stride as i32),
        &mut sc.acc,
        &mut sc.ml,
        &(hq as i32),
        &(pool.hkv as i32),
        &(hd as i32),
        &(pool.block_size as i32),
        &(split_len as i32),
        &scale,
        &(kt as i32)
    )?;
    launch!(
        gpu,
        A::kernel("attn_decode_combine"),
        cfg((b, hq, 1), 128, 0),
        &sc.acc,
        &sc.ml,
        out,
        &(hq as i32),
        &(hd as i32),
        &(nsplit as i32)
    )
}

/// `o *= sigmoid(gate)` over `n` values.
pub fn sigmoid_gate_mul<A: Act>(
    gpu: &Gpu,
    o: &mut DeviceBuffer<A>,
    gate: &DeviceBuffer<A>,
    n: usize,
) -> Result<()> {
    need("sigmoid_gate_mul", o.len() >= n && gate.len() >= n, || {
        "sizes".into()
    })?;
    launch!(
        gpu,
        A::kernel("sigmoid_gate_mul"),
        stride_cfg(n),
        o,
        gate,
        &(n as i64)
    )
}

// ---------------------------------------------------------------- Gated DeltaNet

/// Per-sequence GDN state pools: conv `[slots, C, K-1]` and recurrent `[slots, hv, dk, dv]` (fp32).
pub struct GdnPool {
    pub conv: F32,
    pub rec: F32,
    pub slots: usize,
}

impl GdnPool {
    pub fn new(
        gpu: &Gpu,
        slots: usize,
        conv_dim: usize,
        k: usize,
        hv: usize,
        dk: usize,
        dv: usize,
    ) -> Result<GdnPool> {
        Ok(GdnPool {
            conv: gpu.zeros(slots * conv_dim * (k - 1))?,
            rec: gpu.zeros(slots * hv * dk * dv)?,
            slots,
        })
    }
}

/// Causal depthwise conv + SiLU over packed sequences (`cu` = B+1 offsets), updating the state.
pub fn causal_conv<A: Act>(
    gpu: &Gpu,
    x: &DeviceBuffer<A>,
    pool: &mut GdnPool,
    w: &DeviceBuffer<A>,
    y: &mut DeviceBuffer<A>,
    cu: &I32,
    slots: &I32,
    b: usize,
    t: usize,
    c: usize,
    k: usize,
) -> Result<()> {
    need(
        "causal_conv",
        (2..=8).contains(&k)
            && x.len() >= t * c
            && y.len() >= t * c
            && w.len() >= c * k
            && cu.len() > b,
        || format!("k={k}"),
    )?;
    launch!(
        gpu,
        A::kernel("causal_conv"),
        cfg((c.div_ceil(128), b, 1), 128, 0),
        x,
        &mut pool.conv,
        w,
        y,
        cu,
        slots,
        &(c as i32),
        &(k as i32)
    )
}

pub fn gdn_gates<A: Act>(
    gpu: &Gpu,
    bproj: &DeviceBuffer<A>,
    aproj: &DeviceBuffer<A>,
    a_log: &F32,
    dt_bias: &F32,
    beta: &mut F32,
    g: &mut F32,
    t: usize,
    hv: usize,
) -> Result<()> {
    let n = t * hv;
    need(
        "gdn_gates",
        bproj.len() >= n
            && aproj.len() >= n
            && beta.len() >= n
            && g.len() >= n
            && a_log.len() >= hv,
        || "sizes".into(),
    )?;
    launch!(
        gpu,
        A::kernel("gdn_gates"),
        stride_cfg(n),
        bproj,
        aproj,
        a_log,
        dt_bias,
        beta,
        g,
        &(hv as i32),
        &(n as i64)
    )
}

/// Epsilon of the q/k L2 norm of [`gdn_qkv_prep`] (`(Σx² + eps)^-½`, as the CPU model's).
pub const GDN_QK_NORM_EPS: f32 = 1e-6;

/// fp32 q̂, k̂ (L2-normalised; q scaled by dk^-½) and v from the conv output.
pub fn gdn_qkv_prep<A: Act>(
    gpu: &Gpu,
    y: &DeviceBuffer<A>,
    qn: &mut F32,
    kn: &mut F32,
    v: &mut F32,
    t: usize,
    hk: usize,
    hv: usize,
    dk: usize,
    dv: usize,
) -> Result<()> {
    qkv_prep(gpu, y, None, qn, kn, v, t, hk, hv, dk, dv)
}

/// The gate inputs and outputs of [`gdn_gates`], for the fused [`gdn_qkv_prep_gates`].
pub struct GdnGates<'a, A: Act> {
    pub bproj: &'a DeviceBuffer<A>,
    pub aproj: &'a DeviceBuffer<A>,
    pub a_log: &'a F32,
    pub dt_bias: &'a F32,
    pub beta: &'a mut F32,
    pub g: &'a mut F32,
}

/// [`gdn_qkv_prep`] and [`gdn_gates`] in one launch.
pub fn gdn_qkv_prep_gates<A: Act>(
    gpu: &Gpu,
    y: &DeviceBuffer<A>,
    gates: GdnGates<'_, A>,
    qn: &mut F32,
    kn: &mut F32,
    v: &mut F32,
    t: usize,
    hk: usize,
    hv: usize,
    dk: usize,
    dv: usize,
) -> Result<()> {
    let n = t * hv;
    need(
        "gdn_qkv_prep_gates",
        gates.bproj.len() >= n
            && gates.aproj.len() >= n
            && gates.beta.len() >= n
            && gates.g.len() >= n
            && gates.a_log.len() >= hv
            && gates.dt_bias.len() >= hv,
        || "gate sizes".into(),
    )?;
    qkv_prep(gpu, y, Some(gates), qn, kn, v, t, hk, hv, dk, dv)
}

fn qkv_prep<A: Act>(
    gpu: &Gpu,
    y: &DeviceBuffer<A>,
    gates: Option<GdnGates<'_, A>>,
    qn: &mut F32,
    kn: &mut F32,
    v: &mut F32,
    t: usize,
    hk: usize,
    hv: usize,
    dk: usize,
    dv: usize,
) -> Result<()> {
    need(
        "gdn_qkv_prep",
        hk > 0
            && hv % hk == 0
            && y.len() >= t * (2 * hk * dk + hv * dv)
            && qn.len() >= t * hk * dk
            && kn.len() >= t * hk * dk
            && v.len() >= t * hv * dv,
        || "sizes".into(),
    )?;
    let (bp, ap, al, dt) = match &gates {
        Some(x) => (Some(x.bproj), Some(x.aproj), Some(x.a_log), Some(x.dt_bias)),
        None => (None, None, None, None),
    };
    let (beta, g) = match gates {
        Some(x) => (Some(&*x.beta), Some(&*x.g)),
        None => (None, None),
    };
    launch!(
        gpu,
        A::kernel("gdn_qkv_prep"),
        cfg((t, hk, 1), 128, 0),
        y,
        qn,
        kn,
        v,
        bp,
        ap,
        al,
        dt,
        beta,
        g,
        &(hk as i32),
        &(hv as i32),
        &(dk as i32),
        &(dv as i32),
        &GDN_QK_NORM_EPS
    )
}

/// Inputs of the delta rule on device (fp32).
pub struct DeltaBufs<'a> {
    pub qn: &'a F32,
    pub kn: &'a F32,
    pub v: &'a F32,
    pub beta: &'a F32,
    pub g: &'a F32,
    pub hk: usize,
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
}

/// Rows of the state one thread of `gdn_recurrent` keeps in registers (`GDN_ROWS` in gdn.cu).
pub const GDN_ROWS: usize = 32;
/// Most threads per block of `gdn_recurrent` (`GDN_REC_THREADS`, its launch bounds).
pub const GDN_REC_THREADS: usize = 256;

/// `(columns, threads)` per block of `gdn_recurrent`: `ceil(dk / GDN_ROWS)` row parts of each
/// of `min(dv, GDN_REC_THREADS / parts)` columns (the grid covers `dv` in column blocks). `None`
/// when one column's row parts alone exceed the bound (`dk > GDN_ROWS · GDN_REC_THREADS`).
pub fn gdn_recurrent_block(dk: usize, dv: usize) -> Option<(usize, usize)> {
    let parts = dk.div_ceil(GDN_ROWS);
    let cols = dv.min(GDN_REC_THREADS / parts.max(1));
    (parts >= 1 && cols >= 1).then_some((cols, cols * parts))
}

/// Recurrent delta rule, one token per sequence (decode): each fp32 state element is read once
/// and written once per step.
pub fn gdn_recurrent<A: Act>(
    gpu: &Gpu,
    x: &DeltaBufs<'_>,
    pool: &mut GdnPool,
    slots: &I32,
    b: usize,
    out: &mut DeviceBuffer<A>,
) -> Result<()> {
    let shape = gdn_recurrent_block(x.dk, x.dv).filter(|_| x.dv >= 1);
    need(
        "gdn_recurrent",
        shape.is_some() && out.len() >= b * x.hv * x.dv && x.qn.len() >= b * x.hk * x.dk,
        || format!("dk {} (at most {}), dv {} (at least 1), or sizes", x.dk, GDN_ROWS * GDN_REC_THREADS, x.dv),
    )?;
    let (cols, block) = shape.unwrap_or((1, 1));
    let parts = x.dk.div_ceil(GDN_ROWS);
    let shmem = (2 * x.dk + 2 * parts * cols + parts) * 4;
    launch!(
        gpu,
        A::kernel("gdn_recurrent"),
        cfg((b, x.hv, x.dv.div_ceil(cols)), block, shmem),
        x.qn,
        x.kn,
        x.v,
        x.beta,
        x.g,
        &mut pool.rec,
        out,
        slots,
        &(x.hk as i32),
        &(x.hv as i32),
        &(x.dk as i32),
        &(x.dv as i32)
    )
}

/// Tokens per chunk of the chunked delta rule (`GDN_CHUNK` in gdn.cu).
pub const GDN_CHUNK: usize = 64;

/// Scratch (fp32 elements) of the one-kernel chunked delta rule: U and W of one chunk per
/// (sequence, value head).
pub fn gdn_chunked_scratch_min(b: usize, hv: usize, dk: usize, dv: usize) -> usize {
    b * hv * GDN_CHUNK * (dk + dv)
}

/// Scratch (fp32 elements) with which [`gdn_chunked`] takes the chunk-parallel form: U, W and
/// Pm of every chunk of the batch (at most `ceil(t / 64) + b` chunks) per value head.
pub fn gdn_chunked_scratch_parallel(b: usize, t: usize, hv: usize, dk: usize, dv: usize) -> usize {
    (t.div_ceil(GDN_CHUNK) + b) * hv * GDN_CHUNK * (dk + dv + GDN_CHUNK)
}

/// Chunked delta rule over packed sequences (prefill) from and into the states of `slots`. With a
/// `scratch` of [`gdn_chunked_scratch_parallel`] fp32 elements the intra-chunk work (A, U, W,
/// Pm) runs for all chunks in parallel (`gdn_chunk_prep`) and a state pass per (sequence, head)
/// follows (`gdn_chunk_state`); with at least [`gdn_chunked_scratch_min`] the one-kernel form
/// (`gdn_chunked`) runs. Same results either way.
pub fn gdn_chunked<A: Act>(
    gpu: &Gpu,
    x: &DeltaBufs<'_>,
    pool: &mut GdnPool,
    scratch: &mut F32,
    cu: &I32,
    slots: &I32,
    b: usize,
    t: usize,
    out: &mut DeviceBuffer<A>,
) -> Result<()> {
    need(
        "gdn_chunked",
        scratch.len() >= gdn_chunked_scratch_min(b, x.hv, x.dk, x.dv)
            && out.len() >= t * x.hv * x.dv
            && cu.len() > b
            && slots.len() >= b,
        || "scratch too small".into(),
    )?;
    let dims = (&(x.hk as i32), &(x.hv as i32), &(x.dk as i32), &(x.dv as i32));
    if scratch.len() < gdn_chunked_scratch_parallel(b, t, x.hv, x.dk, x.dv) {
        return launch!(
            gpu,
            A::kernel("gdn_chunked"),
            cfg((b, x.hv, 1), 256, 0),
            x.qn,
            x.kn,
            x.v,
            x.beta,
            x.g,
            &mut pool.rec,
            out,
            scratch,
            cu,
            slots,
            dims.0,
            dims.1,
            dims.2,
            dims.3
        );
    }
    launch!(
        gpu,
        A::kernel("gdn_chunk_prep"),
        cfg((t.div_ceil(GDN_CHUNK) + b, x.hv, 1), 256, 0),
        x.qn,
        x.kn,
        x.v,
        x.beta,
        x.g,
        scratch,
        cu,
        &(b as i32),
        dims.0,
        dims.1,
        dims.2,
        dims.3
    )?;
    launch!(
        gpu,
        A::kernel("gdn_chunk_state"),
        cfg((b, x.hv, 1), 256, 0),
        x.qn,
        x.kn,
        x.beta,
        x.g,
        &mut pool.rec,
        out,
        scratch,
        cu,
        slots,
        dims.0,
        dims.1,
        dims.2,
        dims.3
    )
}

// ---------------------------------------------------------------- MoE

/// Routing on device: `idx`/`wts` `[t, k]`; `forced` replays a recorded routing. Generic over
/// the storage type only for its rounding of the weights (bf16 like HF in the bf16 build, none
/// in the f32 build).
pub fn router_topk<A: Act>(
    gpu: &Gpu,
    logits: &F32,
    idx: &mut I32,
    wts: &mut F32,
    forced: Option<&I32>,
    t: usize,
    e: usize,
    k: usize,
) -> Result<()> {
    router_topk_counting::<A>(gpu, logits, idx, wts, forced, None, t, e, k)
}

/// [`router_topk`] that also counts the chosen experts into `counts` (which must be zero on
/// entry: fresh, or left so by `moe_scan_scatter`).
fn router_topk_counting<A: Act>(
    gpu: &Gpu,
    logits: &F32,
    idx: &mut I32,
    wts: &mut F32,
    forced: Option<&I32>,
    counts: Option<&mut I32>,
    t: usize,
    e: usize,
    k: usize,
) -> Result<()> {
    need(
        "router_topk",
        e <= 1024
            && k <= 32
            && k <= e
            && logits.len() >= t * e
            && idx.len() >= t * k
            && wts.len() >= t * k,
        || format!("e={e} k={k}"),
    )?;
    launch!(
        gpu,
        A::kernel("router_topk"),
        cfg((t.div_ceil(4), 1, 1), 128, 0),
        logits,
        idx,
        wts,
        forced,
        counts.map(|c| &*c),
        &(t as i32),
        &(e as i32),
        &(k as i32)
    )
}

/// Grouping of the `t·k` (token, slot) pairs by expert: `offsets [e+1]`, `perm [t·k]` (pair of
/// each grouped row), `row_of_pair [t·k]`, and the grouped GEMMs' tile list built on the device
/// from the counts: `tiles [2·j..2·j+2]` = (expert, first row) of tile `j < ntiles[0]`, each tile
/// at most `tile_m` rows of one expert. `counts` is zero between calls (the scan zeroes it).
pub struct MoeGroups {
    pub counts: I32,
    pub offsets: I32,
    pub perm: I32,
    pub row_of_pair: I32,
    pub tiles: I32,
    pub ntiles: I32,
    /// Rows per tile of the current grouping (16: weight-streaming decode tiles; 64).
    pub tile_m: usize,
    /// Upper bound on the current number of tiles (the GEMM grid; blocks past `ntiles` exit).
    pub max_tiles: usize,
    experts: usize,
}

/// Rows per tile for `pairs` routed rows over `e` experts: 16 (the weight-streaming tensor-core
/// path) while experts average at most 8 rows, else 64.
pub fn moe_tile_rows(pairs: usize, e: usize) -> usize {
    if pairs <= 8 * e {
        16
    } else {
        64
    }
}

/// Most tiles `pairs` rows over `e` experts can need with `tile_m` rows per tile: every expert
/// with rows adds at most one partial tile, `Σ ceil(c_e / m) ≤ min(e, pairs) + pairs / m`.
pub fn moe_max_tiles(pairs: usize, e: usize, tile_m: usize) -> usize {
    e.min(pairs) + pairs / tile_m
}

impl MoeGroups {
    pub fn new(gpu: &Gpu, max_pairs: usize, e: usize) -> Result<MoeGroups> {
        Ok(MoeGroups {
            counts: gpu.zeros(e)?,
            offsets: gpu.zeros(e + 1)?,
            perm: gpu.zeros(max_pairs)?,
            row_of_pair: gpu.zeros(max_pairs)?,
            tiles: gpu.zeros(2 * moe_max_tiles(max_pairs, e, 16).max(1))?,
            ntiles: gpu.zeros(1)?,
            tile_m: 64,
            max_tiles: 0,
            experts: e,
        })
    }
}

/// Check the grouping buffers and pick the tile height for `pairs` rows.
fn group_plan(op: &'static str, idx: &I32, pairs: usize, e: usize, g: &mut MoeGroups) -> Result<()> {
    need(
        op,
        (1..=1024).contains(&e)
            && e == g.experts
            && idx.len() >= pairs
            && g.perm.len() >= pairs,
        || format!("{e} experts (1..=1024, as allocated: {}), {pairs} pairs", g.experts),
    )?;
    g.tile_m = moe_tile_rows(pairs, e);
    g.max_tiles = moe_max_tiles(pairs, e, g.tile_m);
    Ok(())
}

/// Scan, tile list and scatter in one block (after the counts).
fn scan_scatter(gpu: &Gpu, idx: &I32, pairs: usize, e: usize, g: &mut MoeGroups) -> Result<()> {
    let block = (e.div_ceil(32) * 32).clamp(256, 1024);
    launch!(
        gpu,
        plain("moe_scan_scatter"),
        cfg((1, 1, 1), block, 0),
        idx,
        &mut g.counts,
        &mut g.offsets,
        &mut g.perm,
        &mut g.row_of_pair,
        &mut g.tiles,
        &mut g.ntiles,
        &(pairs as i64),
        &(e as i32),
        &(g.tile_m as i32)
    )
}

/// Group given expert choices `idx [pairs]` (count, then one scan/tile-list/scatter block).
pub fn moe_group(gpu: &Gpu, idx: &I32, pairs: usize, e: usize, g: &mut MoeGroups) -> Result<()> {
    group_plan("moe_group", idx, pairs, e, g)?;
    launch!(
        gpu,
        plain("moe_count"),
        stride_cfg(pairs),
        idx,
        &mut g.counts,
        &(pairs as i64)
    )?;
    scan_scatter(gpu, idx, pairs, e, g)
}

/// Route and group in two launches: [`router_topk`] counting the chosen experts as it writes
/// them, then the scan / tile list / scatter block.
pub fn route_and_group<A: Act>(
    gpu: &Gpu,
    logits: &F32,
    idx: &mut I32,
    wts: &mut F32,
    forced: Option<&I32>,
    t: usize,
    e: usize,
    k: usize,
    g: &mut MoeGroups,
) -> Result<()> {
    let pairs = t * k;
    group_plan("route_and_group", idx, pairs, e, g)?;
    router_topk_counting::<A>(gpu, logits, idx, wts, forced, Some(&mut g.counts), t, e, k)?;
    scan_scatter(gpu, idx, pairs, e, g)
}

/// Which kernel computes the grouped expert GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertGemm {
    /// bf16 storage: the weight-streaming tensor-core kernel for 16-row tiles, the staged
    /// tensor-core kernel otherwise; f32 storage: the fp32 FMA kernel.
    Auto,
    /// `grouped_gemm`: fp32 FMA tiles (exact in f32 storage).
    Fma,
    /// `grouped_gemm_mma`: 64 x 64 tiles staged in shared memory, bf16 `mma.sync`.
    Mma,
    /// `grouped_gemm_stream`: 16-row tiles, weights streamed into `mma.sync` fragments
    /// (needs a 16-row grouping).
    Stream,
}

/// Grouped expert GEMM: rows of group `e` times `w[e]ᵀ` (`w` `[E, n, kd]`) over the grouping's
/// device tile list. `gather` reads token rows `x[perm[row] / topk]`; otherwise `x` is already
/// grouped. `pairs` rows are written.
pub fn grouped_gemm<A: Act>(
    gpu: &Gpu,
    x: &DeviceBuffer<A>,
    w: &DeviceBuffer<A>,
    out: &mut DeviceBuffer<A>,
    g: &MoeGroups,
    gather: bool,
    topk: usize,
    e: usize,
    n: usize,
    kd: usize,
    pairs: usize,
) -> Result<()> {
    grouped_gemm_with(
        gpu,
        ExpertGemm::Auto,
        x,
        w,
        out,
        g,
        gather,
        topk,
        e,
        n,
        kd,
        pairs,
    )
}

/// [`grouped_gemm`] with the kernel chosen by the caller.
pub fn grouped_gemm_with<A: Act>(
    gpu: &Gpu,
    path: ExpertGemm,
    x: &DeviceBuffer<A>,
    w: &DeviceBuffer<A>,
    out: &mut DeviceBuffer<A>,
    g: &MoeGroups,
    gather: bool,
    topk: usize,
    e: usize,
    n: usize,
    kd: usize,
    pairs: usize,
) -> Result<()> {
    expert_gemm(gpu, path, x, w, out, g, gather, topk, e, n, kd, pairs, false)
}

/// The kernel `path` resolves to for storage type `A` over `g`'s tile list under `gpu`'s
/// [`Switches`](super::Switches): `Auto` is the FMA kernel in the f32 build, else the
/// weight-streaming kernel for 16-row tiles and the staged tensor-core kernel otherwise, each
/// unless switched off (`stream-gemm` → staged, `mma-gemm` → FMA). An explicit path is kept.
pub fn expert_gemm_path<A: Act>(gpu: &Gpu, path: ExpertGemm, g: &MoeGroups) -> ExpertGemm {
    let sw = gpu.switches();
    match path {
        ExpertGemm::Auto if A::TYPE == crate::tensor::device::ActType::F32 => ExpertGemm::Fma,
        ExpertGemm::Auto if g.tile_m <= 16 && sw.stream_gemm => ExpertGemm::Stream,
        ExpertGemm::Auto if sw.mma_gemm => ExpertGemm::Mma,
        ExpertGemm::Auto => ExpertGemm::Fma,
        p => p,
    }
}

/// Whether the grouped gate|up GEMM of storage type `A` over `g` runs with SwiGLU fused into
/// its epilogue ([`grouped_gemm_swiglu`]): when `Auto` resolves to a tensor-core kernel.
pub fn fuses_swiglu<A: Act>(gpu: &Gpu, g: &MoeGroups) -> bool {
    expert_gemm_path::<A>(gpu, ExpertGemm::Auto, g) != ExpertGemm::Fma
}

/// `flags` bits of the tensor-core expert GEMMs (`MOE_SWIGLU`, `MOE_NO_CP_ASYNC` in moe.cu).
const MOE_SWIGLU: i32 = 1;
const MOE_NO_CP_ASYNC: i32 = 2;

/// The token rows' gate|up expert GEMM with SwiGLU in its epilogue: `act [pairs, i]` =
/// `SiLU(g)·u` of `g`, `u` = the grouped rows times `w_gu[e]` rows `c` and `i + c` (`w_gu`
/// `[E, 2i, kd]`), with the rounding of [`swiglu`]; the `[pairs, 2i]` gate|up rows never reach
/// memory. Tensor-core paths only (`Auto`, `Mma`, `Stream`).
pub fn grouped_gemm_swiglu<A: Act>(
    gpu: &Gpu,
    path: ExpertGemm,
    x: &DeviceBuffer<A>,
    w_gu: &DeviceBuffer<A>,
    act: &mut DeviceBuffer<A>,
    g: &MoeGroups,
    topk: usize,
    e: usize,
    i: usize,
    kd: usize,
    pairs: usize,
) -> Result<()> {
    need(
        "grouped_gemm_swiglu",
        w_gu.len() >= e * 2 * i * kd,
        || "weights".into(),
    )?;
    expert_gemm(gpu, path, x, w_gu, act, g, true, topk, e, i, kd, pairs, true)
}

fn expert_gemm<A: Act>(
    gpu: &Gpu,
    path: ExpertGemm,
    x: &DeviceBuffer<A>,
    w: &DeviceBuffer<A>,
    out: &mut DeviceBuffer<A>,
    g: &MoeGroups,
    gather: bool,
    topk: usize,
    e: usize,
    n: usize,
    kd: usize,
    pairs: usize,
    swiglu: bool,
) -> Result<()> {
    let path = expert_gemm_path::<A>(gpu, path, g);
    need(
        "grouped_gemm",
        e == g.experts
            && w.len() >= e * n * kd
            && out.len() >= pairs * n
            && (path != ExpertGemm::Stream || g.tile_m <= 16)
            && !(swiglu && path == ExpertGemm::Fma),
        || format!("sizes, or {path:?} over {}-row tiles (swiglu: {swiglu})", g.tile_m),
    )?;
    let (name, block) = match path {
        ExpertGemm::Fma => ("grouped_gemm", 256),
        ExpertGemm::Mma => ("grouped_gemm_mma", 128),
        _ => ("grouped_gemm_stream", 128),
    };
    let dims = cfg((n.div_ceil(if swiglu { 32 } else { 64 }), g.max_tiles, 1), block, 0);
    if path == ExpertGemm::Fma {
        return launch!(
            gpu,
            A::kernel(name),
            dims,
            x,
            w,
            out,
            &g.offsets,
            &g.perm,
            &g.tiles,
            &g.ntiles,
            &(gather as i32),
            &(topk as i32),
            &(n as i32),
            &(kd as i32),
            &(g.tile_m as i32)
        );
    }
    launch!(
        gpu,
        A::kernel(name),
        dims,
        x,
        w,
        out,
        &g.offsets,
        &g.perm,
        &g.tiles,
        &g.ntiles,
        &(gather as i32),
        &(topk as i32),
        &(n as i32),
        &(kd as i32),
        &(g.tile_m as i32),
        &(if swiglu { MOE_SWIGLU } else { 0 } | if gpu.switches().cp_async { 0 } else { MOE_NO_CP_ASYNC })
    )
}

/// One `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` on raw per-lane registers
/// (`a [32·4]`, `b [32·2]` bf16x2 words as i32 bits, `c`/`d` `[32·4]` f32): the tensor-core lane probe.
pub fn mma_probe(gpu: &Gpu, a: &I32, b: &I32, c: &F32, d: &mut F32) -> Result<()> {
    need(
        "mma_probe",
        a.len() >= 128 && b.len() >= 64 && c.len() >= 128 && d.len() >= 128,
        || "sizes".into(),
    )?;
    launch!(gpu, <u16 as Act>::kernel("mma_probe"), cfg((1, 1, 1), 32, 0), a, b, c, d)
}

pub fn swiglu<A: Act>(
    gpu: &Gpu,
    gu: &DeviceBuffer<A>,
    act: &mut DeviceBuffer<A>,
    rows: usize,
    i: usize,
) -> Result<()> {
    need(
        "swiglu",
        gu.len() >= rows * 2 * i && act.len() >= rows * i,
        || "sizes".into(),
    )?;
    launch!(
        gpu,
        A::kernel("swiglu"),
        stride_cfg(rows * i),
        gu,
        act,
        &(i as i32),
        &(rows as i64)
    )
}

pub fn silu_mul<A: Act>(
    gpu: &Gpu,
    g: &DeviceBuffer<A>,
    u: &DeviceBuffer<A>,
    act: &mut DeviceBuffer<A>,
    n: usize,
) -> Result<()> {
    need(
        "silu_mul",
        g.len() >= n && u.len() >= n && act.len() >= n,
        || "sizes".into(),
    )?;
    launch!(
        gpu,
        A::kernel("silu_mul"),
        stride_cfg(n),
        g,
        u,
        act,
        &(n as i64)
    )
}

/// `out[t] = Σ_k w·y[row_of_pair] + sigmoid(sg[t])·shared[t]` (shared expert optional).
pub fn moe_combine<A: Act>(
    gpu: &Gpu,
    y: &DeviceBuffer<A>,
    g: &MoeGroups,
    wts: &F32,
    shared: Option<(&DeviceBuffer<A>, &DeviceBuffer<A>)>,
    out: &mut DeviceBuffer<A>,
    t: usize,
    h: usize,
    k: usize,
) -> Result<()> {
    need(
        "moe_combine",
        y.len() >= t * k * h && out.len() >= t * h && wts.len() >= t * k,
        || "sizes".into(),
    )?;
    let (sh, sg) = match shared {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    launch!(
        gpu,
        A::kernel("moe_combine"),
        cfg((t, 1, 1), 256, 0),
        y,
        &g.row_of_pair,
        wts,
        sh,
        sg,
        out,
        &(h as i32),
        &(k as i32)
    )
}

// ---------------------------------------------------------------- sampling

/// Most tokens a truncated draw keeps on device (`SAMPLE_MAX_KEEP` in kernels/sample.cu).
pub const SAMPLE_MAX_KEEP: usize = 2048;

/// One row's sampling settings (as the engine's `SamplingParams`) and its uniform draw in
/// `[0, 1)` from the sequence's random stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleRow {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub u: f64,
}

/// Per-row sampling parameters on device (validated on the host).
pub struct SampleParams {
    temp: F32,
    top_k: I32,
    top_p: F32,
    u: DeviceBuffer<f64>,
}

impl SampleParams {
    pub fn new(gpu: &Gpu, rows: &[SampleRow]) -> Result<SampleParams> {
        let mut p = SampleParams::with_capacity(gpu, rows.len())?;
        p.write(gpu, rows)?;
        Ok(p)
    }

    /// Persistent buffers for up to `rows` rows (overwritten by [`SampleParams::write`]).
    pub fn with_capacity(gpu: &Gpu, rows: usize) -> Result<SampleParams> {
        Ok(SampleParams {
            temp: gpu.zeros(rows)?,
            top_k: gpu.zeros(rows)?,
            top_p: gpu.zeros(rows)?,
            u: gpu.zeros(rows)?,
        })
    }

    /// Rows the buffers hold.
    pub fn capacity(&self) -> usize {
        self.temp.len()
    }

    /// Validate `rows` and copy them into the first rows of the buffers (no allocation).
    pub fn write(&mut self, gpu: &Gpu, rows: &[SampleRow]) -> Result<()> {
        need("sample_tokens", rows.len() <= self.capacity(), || {
            format!("{} rows into buffers of {}", rows.len(), self.capacity())
        })?;
        for (i, r) in rows.iter().enumerate() {
            need(
                "sample_tokens",
                r.temperature.is_finite()
                    && r.temperature >= 0.0
                    && r.top_p > 0.0
                    && r.top_p <= 1.0
                    && r.top_k <= SAMPLE_MAX_KEEP
                    && (0.0..1.0).contains(&r.u),
                || {
                    format!(
                        "row {i}: {r:?} (top_k <= {SAMPLE_MAX_KEEP}, top_p in (0, 1], u in [0, 1))"
                    )
                },
            )?;
        }
        gpu.write(&mut self.temp, &rows.iter().map(|r| r.temperature).collect::<Vec<_>>())?;
        gpu.write(&mut self.top_k, &rows.iter().map(|r| r.top_k as i32).collect::<Vec<_>>())?;
        gpu.write(&mut self.top_p, &rows.iter().map(|r| r.top_p).collect::<Vec<_>>())?;
        gpu.write(&mut self.u, &rows.iter().map(|r| r.u).collect::<Vec<_>>())
    }
}

/// Threads per block of `sample_tokens` (`SAMPLE_THREADS` in sample.cu, its launch bound).
pub const SAMPLE_THREADS: usize = 1024;

/// One token per row with the CPU engine's sampling semantics, its policy log-probability
/// (temperature 1, untruncated) and its log-probability under the sampled distribution. A row
/// whose nucleus (top-p without top-k) needs more than [`SAMPLE_MAX_KEEP`] tokens gets token -1:
/// sample that row on the host.
pub fn sample_tokens(
    gpu: &Gpu,
    logits: &F32,
    b: usize,
    v: usize,
    p: &SampleParams,
    token: &mut I32,
    logprob: &mut F32,
    sampling_logprob: &mut F32,
) -> Result<()> {
    need(
        "sample_tokens",
        v > 0
            && logits.len() >= b * v
            && token.len() >= b
            && logprob.len() >= b
            && sampling_logprob.len() >= b
            && p.temp.len() >= b,
        || "sizes".into(),
    )?;
    launch!(
        gpu,
        plain("sample_tokens"),
        cfg((b, 1, 1), SAMPLE_THREADS, 0),
        logits,
        &(v as i32),
        &p.temp,
        &p.top_k,
        &p.top_p,
        &p.u,
        token,
        logprob,
        sampling_logprob
    )
}

// ---------------------------------------------------------------- initialisation

/// Uniform random values in `[lo, hi)` from a counter hash of (seed, index), on device.
/// Uniform random values in the storage type.
pub fn fill_uniform<A: Act>(
    gpu: &Gpu,
    x: &mut DeviceBuffer<A>,
    seed: u64,
    lo: f32,
    hi: f32,
) -> Result<()> {
    let n = x.len();
    launch!(
        gpu,
        A::kernel("fill_uniform"),
        cfg((n.div_ceil(256).min(65535 * 8), 1, 1), 256, 0),
        x,
        &(n as i64),
        &seed,
        &lo,
        &hi
    )
}

pub fn fill_f32(gpu: &Gpu, x: &mut F32, v: f32) -> Result<()> {
    let n = x.len();
    launch!(gpu, plain("fill_f32"), stride_cfg(n), x, &(n as i64), &v)
}

// ---------------------------------------------------------------- optimizer (kernels/optim.cu)

/// Threads per block of the optimizer's reductions (`OPT_THREADS` in `kernels/optim.cu`).
pub const ADAMW_THREADS: usize = 256;

/// Blocks [`adamw_sq_norm`] uses for a gradient of `n` elements (its number of partial sums).
pub fn adamw_norm_blocks(n: usize) -> usize {
    n.div_ceil(ADAMW_THREADS).clamp(1, 64)
}

/// Per-block sums of `g²` into `partials[offset .. offset + adamw_norm_blocks(g.len())]`.
pub fn adamw_sq_norm(gpu: &Gpu, g: &F32, partials: &mut DeviceBuffer<f64>, offset: usize) -> Result<()> {
    let blocks = adamw_norm_blocks(g.len());
    need("adamw_sq_norm", partials.len() >= offset + blocks && offset <= i32::MAX as usize, || {
        format!("{blocks} partials at {offset} in a buffer of {}", partials.len())
    })?;
    launch!(
        gpu,
        plain("adamw_sq_norm"),
        cfg((blocks, 1, 1), ADAMW_THREADS, 0),
        g,
        &(g.len() as i64),
        partials,
        &(offset as i32)
    )
}

/// `stats[0]` = global norm from the first `count` partial sums, `stats[1]` = the clip factor
/// (`max_norm / (norm + 1e-6)` when `max_norm` is set and exceeded by a finite norm, else 1).
pub fn adamw_clip_scale(
    gpu: &Gpu,
    partials: &DeviceBuffer<f64>,
    count: usize,
    max_norm: Option<f32>,
    stats: &mut DeviceBuffer<f64>,
) -> Result<()> {
    need("adamw_clip_scale", partials.len() >= count && stats.len() >= 2 && count <= i32::MAX as usize, || {
        format!("count={count} partials={} stats={}", partials.len(), stats.len())
    })?;
    launch!(
        gpu,
        plain("adamw_clip_scale"),
        cfg((1, 1, 1), ADAMW_THREADS, 0),
        partials,
        &(count as i32),
        &(max_norm.is_some() as i32),
        &max_norm.unwrap_or(0.0),
        stats
    )
}

/// The host-side numbers of one AdamW step: lr with the schedule applied, the betas, eps,
/// weight decay, and the bias corrections `1 − β^t`.
#[derive(Clone, Copy, Debug)]
pub struct AdamWStep {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    pub bc1: f32,
    pub bc2: f32,
}

/// One AdamW update of a parameter: master `p` and moments `m`, `v` (fp32) from the gradient `g`
/// times the clip factor `stats[1]`; `serve` (the engine's copy, storage type `A`) is rewritten
/// from the new master when given.
pub fn adamw_update<A: Act>(
    gpu: &Gpu,
    p: &mut F32,
    m: &mut F32,
    v: &mut F32,
    g: &F32,
    serve: Option<&mut DeviceBuffer<A>>,
    stats: &DeviceBuffer<f64>,
    h: &AdamWStep,
) -> Result<()> {
    let n = p.len();
    need(
        "adamw_update",
        m.len() == n && v.len() == n && g.len() == n && stats.len() >= 2 && serve.as_ref().is_none_or(|s| s.len() == n),
        || format!("master {n}, m {}, v {}, grad {}", m.len(), v.len(), g.len()),
    )?;
    let serve = serve.map(|s| &*s);
    launch!(
        gpu,
        A::kernel("adamw_update"),
        stride_cfg(n),
        p,
        m,
        v,
        g,
        serve,
        &(n as i64),
        stats,
        &h.lr,
        &h.beta1,
        &h.beta2,
        &h.eps,
        &h.weight_decay,
        &h.bc1,
        &h.bc2
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::cuda::record::RecordingDevice;
    use crate::tensor::cuda::Switches;
    use crate::tensor::device::KernelArg;
    use std::sync::Arc;

    #[test]
    fn gdn_recurrent_blocks_stay_within_the_launch_bound() {
        // 35B-A3B: 4 row parts × 64 columns, two column blocks per head
        assert_eq!(gdn_recurrent_block(128, 128), Some((64, 256)));
        assert_eq!(gdn_recurrent_block(16, 16), Some((16, 16)));
        assert_eq!(gdn_recurrent_block(40, 24), Some((24, 48)));
        assert_eq!(gdn_recurrent_block(4096, 7), Some((2, 256)));
        assert_eq!(gdn_recurrent_block(GDN_ROWS * GDN_REC_THREADS + 1, 4), None);
    }

    #[test]
    fn switches_pick_the_expert_gemm_kernel_and_its_flags() {
        let rec = Arc::new(RecordingDevice::new());
        let gpu = Gpu::from_device(rec.clone()).with_switches(Switches::default());
        let (e, i, h) = (16, 32, 64);
        let mut g = MoeGroups::new(&gpu, 64, e).unwrap();
        let off = |f: fn(&mut Switches)| {
            let mut s = Switches::default();
            f(&mut s);
            gpu.clone().with_switches(s)
        };
        let (no_mma, no_stream, no_cp) = (off(|s| s.mma_gemm = false), off(|s| s.stream_gemm = false), off(|s| s.cp_async = false));
        let path = |gpu: &Gpu, g: &MoeGroups| expert_gemm_path::<u16>(gpu, ExpertGemm::Auto, g);
        for (tile_m, default) in [(16, ExpertGemm::Stream), (64, ExpertGemm::Mma)] {
            g.tile_m = tile_m;
            assert_eq!(path(&gpu, &g), default);
            assert_eq!(path(&no_cp, &g), default);
            assert_eq!(path(&no_stream, &g), ExpertGemm::Mma);
            assert_eq!(path(&no_mma, &g), if tile_m == 16 { ExpertGemm::Stream } else { ExpertGemm::Fma });
            assert_eq!(path(&gpu.clone().with_switches(Switches::PLAIN), &g), ExpertGemm::Fma);
            assert_eq!(expert_gemm_path::<f32>(&gpu, ExpertGemm::Auto, &g), ExpertGemm::Fma);
            // an explicit path is kept whatever the switches say
            assert_eq!(expert_gemm_path::<u16>(&no_mma, ExpertGemm::Mma, &g), ExpertGemm::Mma);
        }
        g.tile_m = 64;
        assert!(fuses_swiglu::<u16>(&gpu, &g) && !fuses_swiglu::<u16>(&no_mma, &g) && !fuses_swiglu::<f32>(&gpu, &g));
        // the cp.async switch reaches the staged kernel as its flag bit
        let x = gpu.zeros::<u16>(64 * h).unwrap();
        let w = gpu.zeros::<u16>(e * 2 * i * h).unwrap();
        let mut act = gpu.zeros::<u16>(64 * i).unwrap();
        for (gpu, flags) in [(&gpu, MOE_SWIGLU), (&no_cp, MOE_SWIGLU | MOE_NO_CP_ASYNC)] {
            rec.set_workload(&format!("flags {flags}"));
            grouped_gemm_swiglu(gpu, ExpertGemm::Auto, &x, &w, &mut act, &g, 1, e, i, h, 64).unwrap();
        }
        let t = rec.table();
        for (n, flags) in [("flags 1", 1), ("flags 3", 3)] {
            let u = t.uses.iter().find(|u| u.workload == n).unwrap();
            assert_eq!((u.kernel.as_str(), u.args.last()), ("grouped_gemm_mma_bf16", Some(&KernelArg::I32(flags))));
        }
    }
}
