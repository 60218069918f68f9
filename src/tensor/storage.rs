//! `Tensor`: a contiguous row-major f32 array whose buffer is shared (`Arc`) and either owned or
//! borrowed in place from a memory-mapped file. Slicing along the first axis is zero-copy, so a
//! fused expert tensor `[E, 2I, H]` serves every expert without a second copy.

use memmap2::Mmap;
use std::sync::Arc;

/// The buffer behind one or more tensors.
#[derive(Debug)]
enum Buffer {
    Owned(Vec<f32>),
    /// f32 data read in place from a mapped checkpoint file (byte offset into the map).
    Mapped {
        map: Arc<Mmap>,
        byte_offset: usize,
        len: usize,
    },
}

impl Buffer {
    fn as_slice(&self) -> &[f32] {
        match self {
            Buffer::Owned(v) => v,
            Buffer::Mapped { map, byte_offset, len } => {
                let bytes = &map[*byte_offset..*byte_offset + len * 4];
                // SAFETY: the constructor checked 4-byte alignment and bounds; f32 has no invalid
                // bit patterns; the map is read-only and lives as long as this buffer.
                unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const f32, *len) }
            }
        }
    }
}

/// A window `[offset, offset+len)` of a shared f32 buffer.
#[derive(Clone, Debug)]
pub struct Storage {
    buf: Arc<Buffer>,
    offset: usize,
    len: usize,
}

impl Storage {
    pub fn owned(v: Vec<f32>) -> Self {
        let len = v.len();
        Storage {
            buf: Arc::new(Buffer::Owned(v)),
            offset: 0,
            len,
        }
    }

    /// Borrow `len` f32 values at `byte_offset` of `map` in place. Returns `None` when the
    /// location is not 4-byte aligned or out of bounds (the caller then copies).
    pub fn mapped(map: Arc<Mmap>, byte_offset: usize, len: usize) -> Option<Self> {
        let end = byte_offset.checked_add(len.checked_mul(4)?)?;
        if end > map.len() || (map.as_ptr() as usize + byte_offset) % 4 != 0 {
            return None;
        }
        Some(Storage {
            buf: Arc::new(Buffer::Mapped { map, byte_offset, len }),
            offset: 0,
            len,
        })
    }

    pub fn as_slice(&self) -> &[f32] {
        &self.buf.as_slice()[self.offset..self.offset + self.len]
    }

    /// True when the data is read in place from a mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(*self.buf, Buffer::Mapped { .. })
    }

    /// Take the owned buffer back without copying: succeeds only when this is the last handle
    /// to an owned buffer and covers all of it; otherwise the storage is returned unchanged.
    pub fn into_vec(self) -> Result<Vec<f32>, Storage> {
        let full = matches!(&*self.buf, Buffer::Owned(v) if self.offset == 0 && v.len() == self.len);
        if !full {
            return Err(self);
        }
        let (offset, len) = (self.offset, self.len);
        match Arc::try_unwrap(self.buf) {
            Ok(Buffer::Owned(v)) => Ok(v),
            Ok(mapped) => Err(Storage { buf: Arc::new(mapped), offset, len }),
            Err(buf) => Err(Storage { buf, offset, len }),
        }
    }

    /// Address of the first value (identity of the buffer, e.g. to show that nothing was copied).
    pub fn data_ptr(&self) -> *const f32 {
        self.as_slice().as_ptr()
    }
}

/// A contiguous row-major f32 tensor.
#[derive(Clone, Debug)]
pub struct Tensor {
    shape: Vec<usize>,
    storage: Storage,
}

impl Tensor {
    /// Wrap `data` with `shape`; panics only on an internal size bug (callers check sizes).
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "tensor size mismatch");
        Tensor {
            shape,
            storage: Storage::owned(data),
        }
    }

    pub fn from_storage(shape: Vec<usize>, storage: Storage) -> Self {
        assert_eq!(shape.iter().product::<usize>(), storage.len, "tensor size mismatch");
        Tensor { shape, storage }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn data(&self) -> &[f32] {
        self.storage.as_slice()
    }

    pub fn numel(&self) -> usize {
        self.storage.len
    }

    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Rows of a 2-D tensor (or the first axis in general).
    pub fn rows(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }

    /// Zero-copy view of index `i` along the first axis (shape drops that axis).
    pub fn index0(&self, i: usize) -> Tensor {
        let inner: usize = self.shape[1..].iter().product();
        assert!(i < self.shape[0]);
        Tensor {
            shape: self.shape[1..].to_vec(),
            storage: Storage {
                buf: self.storage.buf.clone(),
                offset: self.storage.offset + i * inner,
                len: inner,
            },
        }
    }

    /// Zero-copy view of rows `[start, start+n)` along the first axis.
    pub fn narrow0(&self, start: usize, n: usize) -> Tensor {
        let inner: usize = self.shape[1..].iter().product();
        assert!(start + n <= self.shape[0]);
        let mut shape = self.shape.clone();
        shape[0] = n;
        Tensor {
            shape,
            storage: Storage {
                buf: self.storage.buf.clone(),
                offset: self.storage.offset + start * inner,
                len: n * inner,
            },
        }
    }

    /// Same data, new shape with the same element count.
    pub fn reshape(&self, shape: Vec<usize>) -> Tensor {
        assert_eq!(shape.iter().product::<usize>(), self.storage.len);
        Tensor {
            shape,
            storage: self.storage.clone(),
        }
    }
}
