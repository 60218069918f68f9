//! The index arrays of one forward step on the device ([`StepIndex`]): token ids, positions,
//! the batch row of each token, the sequences' token offsets (`cu`), cache slots, lengths after
//! the step, the batch's KV block table and the last row of each sequence. They live in
//! persistent device buffers sized once, when the [`super::CudaState`] is built (most tokens per
//! step, most sequences per step, most blocks a sequence can hold), and each step copies its
//! values into their prefixes: a steady-state step allocates nothing on the device, and every
//! pointer a step's launches receive is the same from step to step.

use crate::tensor::cuda::gpu::{DeviceBuffer, Gpu};
use crate::tensor::device::{DeviceError, Result};

type I32 = DeviceBuffer<i32>;

/// A step's index arrays on the host, packed in batch order (what [`StepIndex::write`] copies).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HostIndex {
    pub ids: Vec<i32>,
    pub pos: Vec<i32>,
    pub seq_of_tok: Vec<i32>,
    /// `[b + 1]` token offsets of the sequences.
    pub cu: Vec<i32>,
    pub slots: Vec<i32>,
    pub lens_after: Vec<i32>,
    /// `[b, stride]` block table.
    pub table: Vec<i32>,
    /// The last row of each sequence (empty when every row gets logits).
    pub last_rows: Vec<i32>,
}

/// Persistent device buffers of a step's index arrays.
pub struct StepIndex {
    pub(super) ids: I32,
    pub(super) pos: I32,
    pub(super) seq_of_tok: I32,
    pub(super) cu: I32,
    pub(super) slots: I32,
    pub(super) lens: I32,
    pub(super) last_rows: I32,
    pub(super) block_table: I32,
}

impl StepIndex {
    /// Buffers for steps of at most `max_tokens` tokens over at most `max_rows` sequences, each
    /// holding at most `row_blocks` KV blocks.
    pub fn new(gpu: &Gpu, max_tokens: usize, max_rows: usize, row_blocks: usize) -> Result<Self> {
        let z = |n: usize| gpu.zeros::<i32>(n.max(1));
        Ok(StepIndex {
            ids: z(max_tokens)?,
            pos: z(max_tokens)?,
            seq_of_tok: z(max_tokens)?,
            cu: z(max_rows + 1)?,
            slots: z(max_rows)?,
            lens: z(max_rows)?,
            last_rows: z(max_rows)?,
            block_table: z(max_rows * row_blocks.max(1))?,
        })
    }

    /// Copy a step's arrays into the prefixes of the buffers (no allocation). A step larger
    /// than the buffers is a shape error.
    pub fn write(&mut self, gpu: &Gpu, h: &HostIndex) -> Result<()> {
        let fits = [
            (h.ids.len(), self.ids.len()),
            (h.pos.len(), self.pos.len()),
            (h.seq_of_tok.len(), self.seq_of_tok.len()),
            (h.cu.len(), self.cu.len()),
            (h.slots.len(), self.slots.len()),
            (h.lens_after.len(), self.lens.len()),
            (h.table.len(), self.block_table.len()),
            (h.last_rows.len(), self.last_rows.len()),
        ];
        if let Some((n, cap)) = fits.iter().find(|(n, cap)| n > cap) {
            return Err(DeviceError::Shape {
                op: "step index",
                msg: format!("{n} entries for a persistent buffer of {cap}"),
            });
        }
        gpu.write(&mut self.ids, &h.ids)?;
        gpu.write(&mut self.pos, &h.pos)?;
        gpu.write(&mut self.seq_of_tok, &h.seq_of_tok)?;
        gpu.write(&mut self.cu, &h.cu)?;
        gpu.write(&mut self.slots, &h.slots)?;
        gpu.write(&mut self.lens, &h.lens_after)?;
        gpu.write(&mut self.block_table, &h.table)?;
        if !h.last_rows.is_empty() {
            gpu.write(&mut self.last_rows, &h.last_rows)?;
        }
        Ok(())
    }
}
