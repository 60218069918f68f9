//! `SeqState`: everything one sequence carries between forward calls — the attention KV cache of
//! each full-attention layer and the conv + recurrent state of each Gated DeltaNet layer.
//! It is `Clone`, so an engine can snapshot a conversation at a turn boundary and resume it.

/// KV cache of one gated-attention layer: k after k_norm and RoPE, v raw; `[len, Hkv, hd]`.
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

/// State of one Gated DeltaNet layer.
#[derive(Clone, Debug)]
pub struct GdnState {
    /// The last `K-1` conv inputs (pre-conv `[q|k|v]` rows), time-major `[K-1, conv_dim]`.
    pub conv: Vec<f32>,
    /// Recurrent state `S` per value head, `[Hv, dk, dv]`, f32.
    pub recurrent: Vec<f32>,
}

#[derive(Clone, Debug)]
pub enum LayerState {
    Attention(KvCache),
    Gdn(GdnState),
}

/// Per-sequence decoding state. `len` tokens have been consumed so far.
#[derive(Clone, Debug)]
pub struct SeqState {
    pub(crate) len: usize,
    pub(crate) layers: Vec<LayerState>,
}

impl SeqState {
    /// Number of tokens already consumed (the position of the next token).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held by the caches (for engine memory accounting).
    pub fn cache_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                LayerState::Attention(kv) => (kv.k.len() + kv.v.len()) * 4,
                LayerState::Gdn(g) => (g.conv.len() + g.recurrent.len()) * 4,
            })
            .sum()
    }
}
