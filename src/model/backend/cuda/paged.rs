//! The paged KV cache's bookkeeping on the host ([`BlockTables`]): one pool of fixed-size KV
//! blocks shared by every attention layer (block `i` of each layer's `KvPool` holds the same
//! tokens), a block table per sequence slot, reference counts so that a snapshot shares its
//! source's blocks, and copy-on-write of a shared, partially filled last block. Memory follows
//! the tokens in use: a slot holds `ceil(len / block_size)` blocks and gives them back when it is
//! released. No device memory here: the caller performs the block copies it is asked for.

/// Why blocks could not be reserved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PagedError {
    #[error(
        "KV cache full: slot {slot} needs {need} more blocks of {block_size} tokens but {free} of \
         {total} are free (raise the KV token budget or run fewer sequences at once)"
    )]
    Full {
        slot: usize,
        need: usize,
        free: usize,
        total: usize,
        block_size: usize,
    },
    #[error("slot {slot} out of range ({slots} slots)")]
    Slot { slot: usize, slots: usize },
}

/// A block to copy before appending: the slot's shared partial last block `from` was replaced
/// in its table by the fresh block `to`, which must first receive `from`'s rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCopy {
    pub from: usize,
    pub to: usize,
}

/// Block allocator and per-slot block tables of the paged KV cache.
#[derive(Debug, Clone)]
pub struct BlockTables {
    block_size: usize,
    /// Reference count of every block (0 = free).
    refs: Vec<u32>,
    /// Free block ids; the next one handed out is the last.
    free: Vec<usize>,
    /// Per slot, its blocks in token order.
    tables: Vec<Vec<usize>>,
}

impl BlockTables {
    /// `blocks` free blocks of `block_size` tokens and `slots` empty tables.
    pub fn new(blocks: usize, block_size: usize, slots: usize) -> Self {
        BlockTables {
            block_size: block_size.max(1),
            refs: vec![0; blocks],
            free: (0..blocks).rev().collect(),
            tables: vec![vec![]; slots],
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn total(&self) -> usize {
        self.refs.len()
    }

    /// Blocks not held by any slot.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// The blocks of `slot`, in token order (empty for an unknown slot).
    pub fn table(&self, slot: usize) -> &[usize] {
        self.tables.get(slot).map_or(&[], Vec::as_slice)
    }

    /// Reference count of `block` (how many slots hold it).
    pub fn refs(&self, block: usize) -> u32 {
        self.refs.get(block).copied().unwrap_or(0)
    }

    fn check(&self, slot: usize) -> Result<(), PagedError> {
        if slot < self.tables.len() {
            Ok(())
        } else {
            Err(PagedError::Slot {
                slot,
                slots: self.tables.len(),
            })
        }
    }

    fn take(&mut self) -> usize {
        let b = self.free.pop().expect("free block counted before taking");
        self.refs[b] = 1;
        b
    }

    fn drop_ref(&mut self, b: usize) {
        self.refs[b] -= 1;
        if self.refs[b] == 0 {
            self.free.push(b);
        }
    }

    /// Make `slot`, which holds `len` written tokens, able to take tokens up to `len_after`:
    /// allocate the missing blocks and, when token `len` falls into a partial last block that
    /// another slot shares, replace it with a fresh block (the returned copy must be made before
    /// anything is appended). All or nothing: when the pool is short, nothing changes.
    pub fn reserve(
        &mut self,
        slot: usize,
        len: usize,
        len_after: usize,
    ) -> Result<Option<BlockCopy>, PagedError> {
        self.check(slot)?;
        let bs = self.block_size;
        let held = self.tables[slot].len();
        let grow = len_after.div_ceil(bs).saturating_sub(held);
        let shared_tail = (len % bs != 0 && len < len_after)
            .then(|| self.tables[slot].get(len / bs).copied())
            .flatten()
            .filter(|&b| self.refs[b] > 1);
        let need = grow + usize::from(shared_tail.is_some());
        if need > self.free.len() {
            return Err(PagedError::Full {
                slot,
                need,
                free: self.free.len(),
                total: self.total(),
                block_size: bs,
            });
        }
        let copy = shared_tail.map(|from| {
            let to = self.take();
            self.drop_ref(from);
            self.tables[slot][len / bs] = to;
            BlockCopy { from, to }
        });
        for _ in 0..grow {
            let b = self.take();
            self.tables[slot].push(b);
        }
        Ok(copy)
    }

    /// Give back every block of `slot` (a block returns to the pool when no slot holds it).
    pub fn release(&mut self, slot: usize) -> Result<(), PagedError> {
        self.check(slot)?;
        for b in std::mem::take(&mut self.tables[slot]) {
            self.drop_ref(b);
        }
        Ok(())
    }

    /// Make `to`'s table share the blocks holding `from`'s first `len` tokens (a snapshot):
    /// `to`'s own blocks are released first; no block is copied.
    pub fn share(&mut self, from: usize, to: usize, len: usize) -> Result<(), PagedError> {
        self.check(from)?;
        self.check(to)?;
        if from == to {
            return Ok(());
        }
        self.release(to)?;
        let n = len.div_ceil(self.block_size).min(self.tables[from].len());
        let blocks = self.tables[from][..n].to_vec();
        for &b in &blocks {
            self.refs[b] += 1;
        }
        self.tables[to] = blocks;
        Ok(())
    }

    /// The block table of a batch, row `r` = the blocks of `slots[r]`, padded with block 0 to the
    /// longest row: `(table [rows, stride], stride)`, stride ≥ 1.
    pub fn batch_table(&self, slots: &[usize]) -> (Vec<i32>, usize) {
        let stride = slots
            .iter()
            .map(|&s| self.table(s).len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut out = vec![0i32; slots.len() * stride];
        for (r, &s) in slots.iter().enumerate() {
            for (i, &b) in self.table(s).iter().enumerate() {
                out[r * stride + i] = b as i32;
            }
        }
        (out, stride)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block is either free or held, and refs count the tables holding it.
    fn consistent(t: &BlockTables) {
        let mut refs = vec![0u32; t.total()];
        for table in &t.tables {
            for &b in table {
                refs[b] += 1;
            }
        }
        assert_eq!(refs, t.refs);
        let held = refs.iter().filter(|&&r| r > 0).count();
        assert_eq!(held + t.free(), t.total());
        assert!(t.free.iter().all(|&b| refs[b] == 0));
    }

    #[test]
    fn blocks_follow_the_tokens_and_return_on_release() {
        let mut t = BlockTables::new(8, 4, 3);
        assert_eq!(t.reserve(0, 0, 5), Ok(None));
        assert_eq!(t.table(0).len(), 2);
        assert_eq!(t.reserve(0, 5, 8), Ok(None)); // fits the second block
        assert_eq!(t.table(0).len(), 2);
        assert_eq!(t.reserve(0, 8, 9), Ok(None));
        assert_eq!((t.table(0).len(), t.free()), (3, 5));
        consistent(&t);
        t.release(0).unwrap();
        assert_eq!((t.table(0).len(), t.free()), (0, 8));
        consistent(&t);
    }

    #[test]
    fn snapshots_share_full_blocks_and_copy_only_the_partial_last_one() {
        let mut t = BlockTables::new(8, 4, 3);
        t.reserve(0, 0, 6).unwrap(); // one full block, one partial (2 of 4)
        t.share(0, 1, 6).unwrap();
        assert_eq!(t.table(0), t.table(1));
        assert_eq!(t.free(), 6, "sharing allocates nothing");
        let (full, tail) = (t.table(0)[0], t.table(0)[1]);
        assert_eq!((t.refs(full), t.refs(tail)), (2, 2));
        // the original appends into the shared partial block: it gets its own copy
        let copy = t
            .reserve(0, 6, 7)
            .unwrap()
            .expect("copy-on-write of the tail");
        assert_eq!(copy.from, tail);
        assert_eq!(t.table(0), &[full, copy.to]);
        assert_eq!(t.table(1), &[full, tail]);
        assert_eq!((t.refs(full), t.refs(tail), t.refs(copy.to)), (2, 1, 1));
        // the snapshot is now the tail's only holder: it appends in place
        assert_eq!(t.reserve(1, 6, 8), Ok(None));
        consistent(&t);
        // a snapshot at a block boundary shares everything and never copies
        t.reserve(2, 0, 4).unwrap();
        t.share(2, 1, 4).unwrap();
        assert_eq!(t.reserve(1, 4, 5), Ok(None));
        assert_eq!(t.table(1).len(), 2);
        consistent(&t);
        for s in 0..3 {
            t.release(s).unwrap();
        }
        assert_eq!(t.free(), 8);
    }

    #[test]
    fn a_full_pool_is_an_error_that_changes_nothing() {
        let mut t = BlockTables::new(3, 4, 2);
        t.reserve(0, 0, 10).unwrap(); // 3 blocks
        let before = t.clone();
        let e = t.reserve(1, 0, 1).unwrap_err();
        assert!(
            matches!(
                e,
                PagedError::Full {
                    need: 1,
                    free: 0,
                    total: 3,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("KV cache full"));
        assert_eq!(t.tables, before.tables);
        assert_eq!(t.free(), 0);
        // a copy-on-write that cannot get its block fails too, leaving the share intact
        t.share(0, 1, 10).unwrap();
        assert!(t.reserve(1, 10, 11).is_err());
        assert_eq!(t.table(1), t.table(0));
        assert!(matches!(
            t.reserve(5, 0, 1),
            Err(PagedError::Slot { slot: 5, .. })
        ));
        consistent(&t);
        // once the sequence ends its blocks serve the next one
        t.release(0).unwrap();
        t.release(1).unwrap();
        assert_eq!(t.reserve(1, 0, 12), Ok(None));
        consistent(&t);
    }

    #[test]
    fn the_batch_table_pads_rows_to_the_longest() {
        let mut t = BlockTables::new(6, 2, 3);
        t.reserve(2, 0, 5).unwrap();
        t.reserve(0, 0, 1).unwrap();
        let (bt, stride) = t.batch_table(&[2, 0, 1]);
        assert_eq!(stride, 3);
        let row = |s: usize| t.table(s).iter().map(|&b| b as i32).collect::<Vec<_>>();
        assert_eq!(&bt[0..3], &row(2)[..]);
        assert_eq!(&bt[3..4], &row(0)[..]);
        assert_eq!(&bt[4..], &[0, 0, 0, 0, 0]);
        assert_eq!(t.batch_table(&[1]), (vec![0], 1));
    }
}
