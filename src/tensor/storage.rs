//! `Tensor`: a contiguous row-major array of f32 or bf16 values whose buffer is shared (`Arc`)
//! and either owned or borrowed in place from a memory-mapped file. Slicing along the first axis
//! is zero-copy, so a fused expert tensor `[E, 2I, H]` serves every expert without a second copy.
//!
//! f32 is the compute format of every activation and of small parameters; bf16 is kept only for
//! weight matrices of bf16 checkpoints (read through [`Tensor::weight`] by the linear-layer
//! kernels, which widen each value exactly to f32 and accumulate in f32), so such a model needs
//! half the memory and half the memory traffic per decode step of an f32 copy.

use super::DType;
use half::bf16;
use memmap2::Mmap;
use std::sync::Arc;

/// The buffer behind one or more tensors.
#[derive(Debug)]
enum Buffer {
    Owned(Vec<f32>),
    OwnedBf16(Vec<bf16>),
    /// f32 or bf16 data read in place from a mapped checkpoint file (byte offset into the map).
    Mapped {
        map: Arc<Mmap>,
        byte_offset: usize,
        len: usize,
        dtype: DType,
    },
}

/// A read-only view of a weight in its storage format.
#[derive(Clone, Copy, Debug)]
pub enum Weight<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
}

impl Weight<'_> {
    pub fn len(&self) -> usize {
        match self {
            Weight::F32(w) => w.len(),
            Weight::Bf16(w) => w.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `[start, start + len)` as f32 into `out` (exact for bf16).
    pub fn widen_into(&self, start: usize, out: &mut [f32]) {
        match self {
            Weight::F32(w) => out.copy_from_slice(&w[start..start + out.len()]),
            Weight::Bf16(w) => super::cpu_bf16::widen(&w[start..start + out.len()], out),
        }
    }
}

impl Buffer {
    fn dtype(&self) -> DType {
        match self {
            Buffer::Owned(_) => DType::F32,
            Buffer::OwnedBf16(_) => DType::BF16,
            Buffer::Mapped { dtype, .. } => *dtype,
        }
    }

    fn weight(&self) -> Weight<'_> {
        match self {
            Buffer::Owned(v) => Weight::F32(v),
            Buffer::OwnedBf16(v) => Weight::Bf16(v),
            Buffer::Mapped { map, byte_offset, len, dtype } => {
                let bytes = &map[*byte_offset..*byte_offset + len * dtype.size()];
                // SAFETY: the constructor checked alignment for the dtype and bounds; f32 and
                // bf16 have no invalid bit patterns (bf16 is `repr(transparent)` over u16); the
                // map is read-only and lives as long as this buffer.
                unsafe {
                    match dtype {
                        DType::BF16 => Weight::Bf16(std::slice::from_raw_parts(bytes.as_ptr() as *const bf16, *len)),
                        _ => Weight::F32(std::slice::from_raw_parts(bytes.as_ptr() as *const f32, *len)),
                    }
                }
            }
        }
    }

    fn as_slice(&self) -> &[f32] {
        match self.weight() {
            Weight::F32(v) => v,
            Weight::Bf16(_) => panic!("a bf16 weight was read as f32 (use Tensor::weight)"),
        }
    }
}

/// A window `[offset, offset+len)` of a shared f32 or bf16 buffer.
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

    pub fn owned_bf16(v: Vec<bf16>) -> Self {
        let len = v.len();
        Storage {
            buf: Arc::new(Buffer::OwnedBf16(v)),
            offset: 0,
            len,
        }
    }

    /// Borrow `len` values of `dtype` (f32 or bf16) at `byte_offset` of `map` in place. Returns
    /// `None` when the location is not aligned for the dtype, out of bounds, or the dtype is not
    /// one kept in place (the caller then copies).
    pub fn mapped(map: Arc<Mmap>, byte_offset: usize, len: usize, dtype: DType) -> Option<Self> {
        let end = byte_offset.checked_add(len.checked_mul(dtype.size())?)?;
        let aligned = (map.as_ptr() as usize + byte_offset) % dtype.size() == 0;
        if end > map.len() || !aligned || dtype == DType::F16 {
            return None;
        }
        Some(Storage {
            buf: Arc::new(Buffer::Mapped { map, byte_offset, len, dtype }),
            offset: 0,
            len,
        })
    }

    /// The f32 values. Panics on a bf16 storage: only weight matrices are bf16 and the model
    /// reads those through [`Storage::weight`].
    pub fn as_slice(&self) -> &[f32] {
        &self.buf.as_slice()[self.offset..self.offset + self.len]
    }

    /// The values in their storage format.
    pub fn weight(&self) -> Weight<'_> {
        let r = self.offset..self.offset + self.len;
        match self.buf.weight() {
            Weight::F32(v) => Weight::F32(&v[r]),
            Weight::Bf16(v) => Weight::Bf16(&v[r]),
        }
    }

    pub fn dtype(&self) -> DType {
        self.buf.dtype()
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
    pub fn data_ptr(&self) -> *const u8 {
        match self.weight() {
            Weight::F32(v) => v.as_ptr() as *const u8,
            Weight::Bf16(v) => v.as_ptr() as *const u8,
        }
    }
}

/// A contiguous row-major tensor (f32, or bf16 for weight matrices).
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

    /// The f32 values (see [`Storage::as_slice`]).
    pub fn data(&self) -> &[f32] {
        self.storage.as_slice()
    }

    /// The values in their storage format (f32 or bf16), for the linear-layer kernels.
    pub fn weight(&self) -> Weight<'_> {
        self.storage.weight()
    }

    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    /// Row `i` of a 2-D tensor as f32 into `out` (an embedding lookup; exact for bf16).
    pub fn row_into(&self, i: usize, out: &mut [f32]) {
        self.weight().widen_into(i * out.len(), out);
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
