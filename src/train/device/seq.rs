//! The index arrays of the one sequence a training forward runs on the device (positions
//! `0..t`, a fresh state), uploaded once and kept on the tape for the backward: positions, a
//! zero row index (block table and sequence of every token), the packed offsets and slot the
//! GDN kernels take, the attention backward's spans and the embedding backward's grouping.

use crate::tensor::cuda::backward::{EmbeddingGroups, SeqSpans};
use crate::tensor::cuda::{DeviceBuffer, Gpu};
use crate::tensor::device::Result;

type I32 = DeviceBuffer<i32>;

pub(super) struct SeqIndex {
    /// Tokens of the sequence.
    pub t: usize,
    /// The token ids.
    pub ids: I32,
    /// Positions `0..t`.
    pub pos: I32,
    /// `t` zeros: every token's block-table row and the one-entry block table, the GDN slot.
    pub zeros: I32,
    /// Offsets `[0, t]` of the one packed sequence.
    pub cu: I32,
    pub spans: SeqSpans,
    pub groups: EmbeddingGroups,
}

impl SeqIndex {
    /// `ids` must already be checked against the vocabulary.
    pub fn new(gpu: &Gpu, ids: &[u32], vocab: usize) -> Result<SeqIndex> {
        let t = ids.len();
        let ids_i: Vec<i32> = ids.iter().map(|&x| x as i32).collect();
        Ok(SeqIndex {
            t,
            ids: gpu.upload(&ids_i)?,
            pos: gpu.upload(&(0..t as i32).collect::<Vec<_>>())?,
            zeros: gpu.zeros(t)?,
            cu: gpu.upload(&[0, t as i32])?,
            spans: SeqSpans::new(gpu, &[0, t])?,
            groups: EmbeddingGroups::new(gpu, ids, vocab)?,
        })
    }

    /// The host offsets of the one sequence (the GDN backward wrappers take them on the host).
    pub fn cu_host(&self) -> [usize; 2] {
        [0, self.t]
    }
}
