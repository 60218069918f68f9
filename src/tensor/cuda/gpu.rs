//! The host side of the device seam: [`Gpu`], a cheap handle on one [`Device`] (the real GPU or
//! the emulator, chosen at run time), and [`DeviceBuffer`], a typed allocation freed on drop.
//! Launch wrappers, GEMMs, pools and the forward are written once against these two types.
//!
//! The storage type of activations and weights is a type parameter [`Act`] of the host code:
//! `u16` (raw bf16 bits) or `f32`; it selects the kernels' `_bf16` / `_f32` entry points and the
//! GEMM operand type.

use crate::tensor::device::{
    ActType, DevPtr, Device, DeviceError, Gemm, GemmType, GraphId, KernelArg, LaunchDims, Result,
};
use super::switches::Switches;
use std::marker::PhantomData;
use std::sync::Arc;

/// A plain-old-data element that can live in device memory and be copied byte for byte.
///
/// # Safety
/// Implementors must have no padding and accept every bit pattern.
pub unsafe trait Elem: Copy + Default + Send + Sync + 'static {}
// SAFETY: primitive integers and floats: no padding, every bit pattern valid.
unsafe impl Elem for u8 {}
unsafe impl Elem for u16 {}
unsafe impl Elem for i32 {}
unsafe impl Elem for u64 {}
unsafe impl Elem for f32 {}
unsafe impl Elem for f64 {}

fn bytes<T: Elem>(x: &[T]) -> &[u8] {
    // SAFETY: T is plain old data (Elem); the byte view covers exactly the slice.
    unsafe { std::slice::from_raw_parts(x.as_ptr() as *const u8, std::mem::size_of_val(x)) }
}

fn bytes_mut<T: Elem>(x: &mut [T]) -> &mut [u8] {
    // SAFETY: as `bytes`; every bit pattern is a valid T, so writes through the view are sound.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr() as *mut u8, std::mem::size_of_val(x)) }
}

/// Storage type of activations and weights on the device: `u16` (bf16 bits) or `f32`.
pub trait Act: GemmElem {
    const TYPE: ActType;
    /// Host f32 values in this storage (bf16: round to nearest even).
    fn from_f32(x: &[f32]) -> Vec<Self>;
    /// Back to f32.
    fn to_f32(x: &[Self]) -> Vec<f32>;
    /// A host weight in this storage (bf16 weights copied as they are when the storage is bf16).
    fn from_weight(w: crate::tensor::Weight<'_>) -> Vec<Self>;
    /// The name of the kernel `base` compiled for this storage type.
    fn kernel(base: &str) -> String {
        format!("{base}_{}", Self::TYPE.suffix())
    }
}

impl Act for u16 {
    const TYPE: ActType = ActType::Bf16;
    fn from_f32(x: &[f32]) -> Vec<u16> {
        super::to_bf16_bits(x)
    }
    fn to_f32(x: &[u16]) -> Vec<f32> {
        super::from_bf16_bits(x)
    }
    fn from_weight(w: crate::tensor::Weight<'_>) -> Vec<u16> {
        super::weight_bf16_bits(w)
    }
}

impl Act for f32 {
    const TYPE: ActType = ActType::F32;
    fn from_f32(x: &[f32]) -> Vec<f32> {
        x.to_vec()
    }
    fn to_f32(x: &[f32]) -> Vec<f32> {
        x.to_vec()
    }
    fn from_weight(w: crate::tensor::Weight<'_>) -> Vec<f32> {
        match w {
            crate::tensor::Weight::F32(v) => v.to_vec(),
            crate::tensor::Weight::Bf16(v) => v.iter().map(|b| b.to_f32()).collect(),
        }
    }
}

/// The GEMM operand type of an element type used as a GEMM output (`u16` = bf16, `f32`).
pub trait GemmElem: Elem {
    const GEMM: GemmType;
}
impl GemmElem for u16 {
    const GEMM: GemmType = GemmType::Bf16;
}
impl GemmElem for f32 {
    const GEMM: GemmType = GemmType::F32;
}

/// A typed device allocation of `len` elements; freed when dropped.
pub struct DeviceBuffer<T: Elem> {
    ptr: DevPtr,
    len: usize,
    dev: Arc<dyn Device>,
    _t: PhantomData<T>,
}

impl<T: Elem> DeviceBuffer<T> {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The device address of element 0.
    pub fn ptr(&self) -> DevPtr {
        self.ptr
    }
    /// The device address of element `i` (`i <= len`).
    pub fn ptr_at(&self, i: usize) -> DevPtr {
        debug_assert!(i <= self.len);
        self.ptr + (i * std::mem::size_of::<T>()) as u64
    }
}

impl<T: Elem> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        self.dev.free(self.ptr);
    }
}

impl<T: Elem> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer[{}; {:#x}]", self.len, self.ptr)
    }
}

/// Something passed to a kernel by value: a buffer (its address), an optional buffer (null when
/// absent), or a scalar.
pub trait Arg {
    fn arg(&self) -> KernelArg;
}
impl<T: Elem> Arg for DeviceBuffer<T> {
    fn arg(&self) -> KernelArg {
        KernelArg::Ptr(self.ptr)
    }
}
impl<T: Elem> Arg for Option<&DeviceBuffer<T>> {
    fn arg(&self) -> KernelArg {
        KernelArg::Ptr(self.map_or(0, |b| b.ptr))
    }
}
impl Arg for i32 {
    fn arg(&self) -> KernelArg {
        KernelArg::I32(*self)
    }
}
impl Arg for i64 {
    fn arg(&self) -> KernelArg {
        KernelArg::I64(*self)
    }
}
impl Arg for u64 {
    fn arg(&self) -> KernelArg {
        KernelArg::U64(*self)
    }
}
impl Arg for f32 {
    fn arg(&self) -> KernelArg {
        KernelArg::F32(*self)
    }
}
impl<A: Arg + ?Sized> Arg for &A {
    fn arg(&self) -> KernelArg {
        (**self).arg()
    }
}
impl<A: Arg + ?Sized> Arg for &mut A {
    fn arg(&self) -> KernelArg {
        (**self).arg()
    }
}

/// Which device to open (`--device cuda[:N] | emulator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Cuda(usize),
    Emulator,
}

/// Work enqueued through a [`Gpu`] handle and its clones since it was opened: kernel launches,
/// GEMM calls (cuBLAS: at least one kernel each) and memsets — what a decode step costs in
/// launches, counted the same way on the GPU and on the emulator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub launches: u64,
    pub gemms: u64,
    pub memsets: u64,
}

impl OpCounts {
    /// Everything enqueued: launches + GEMMs + memsets.
    pub fn total(&self) -> u64 {
        self.launches + self.gemms + self.memsets
    }
    /// `self - before` (the work of the calls in between).
    pub fn since(&self, before: OpCounts) -> OpCounts {
        OpCounts {
            launches: self.launches - before.launches,
            gemms: self.gemms - before.gemms,
            memsets: self.memsets - before.memsets,
        }
    }
}

#[derive(Default)]
struct Counters {
    launches: std::sync::atomic::AtomicU64,
    gemms: std::sync::atomic::AtomicU64,
    memsets: std::sync::atomic::AtomicU64,
    allocs: std::sync::atomic::AtomicU64,
    graph_launches: std::sync::atomic::AtomicU64,
}

fn bump(c: &std::sync::atomic::AtomicU64) {
    c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A handle on one device; cloning shares it (and its [`OpCounts`]).
#[derive(Clone)]
pub struct Gpu {
    dev: Arc<dyn Device>,
    counts: Arc<Counters>,
    switches: Switches,
}

impl Gpu {
    /// Wrap a device, with the switches of `$EXECCRITIC_CUDA_DISABLE` (an unknown name there is
    /// warned about and ignored here; [`Gpu::open`] refuses it).
    pub fn from_device(dev: Arc<dyn Device>) -> Gpu {
        let switches = Switches::from_env().unwrap_or_else(|e| {
            tracing::warn!("{e}; ignoring it");
            Switches::default()
        });
        Gpu {
            dev,
            counts: Arc::default(),
            switches,
        }
    }

    /// The paths this handle may take ([`Switches`]).
    pub fn switches(&self) -> Switches {
        self.switches
    }

    /// This handle with other switches (the same device and counters).
    pub fn with_switches(mut self, switches: Switches) -> Gpu {
        self.switches = switches;
        self
    }

    /// Launches, GEMMs and memsets enqueued through this handle and its clones so far.
    pub fn op_counts(&self) -> OpCounts {
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        OpCounts {
            launches: get(&self.counts.launches),
            gemms: get(&self.counts.gemms),
            memsets: get(&self.counts.memsets),
        }
    }

    /// Device allocations made through this handle and its clones so far (every buffer,
    /// including uploads): a steady-state engine step should add none.
    pub fn allocations(&self) -> u64 {
        self.counts
            .allocs
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Captured graphs launched through this handle and its clones so far.
    pub fn graph_launches(&self) -> u64 {
        self.counts
            .graph_launches
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Start capturing the work enqueued from now on into a graph (not run until launched);
    /// `Unsupported` on a device without graphs.
    pub fn begin_capture(&self) -> Result<()> {
        self.dev.begin_capture()
    }

    /// End the capture: the captured graph.
    pub fn end_capture(&self) -> Result<GraphId> {
        self.dev.end_capture()
    }

    /// Run a captured graph again (same pointers, same scalars).
    pub fn launch_graph(&self, id: GraphId) -> Result<()> {
        bump(&self.counts.graph_launches);
        self.dev.launch_graph(id)
    }

    /// Free a captured graph.
    pub fn drop_graph(&self, id: GraphId) {
        self.dev.drop_graph(id)
    }

    /// Open the real GPU `ordinal` (feature `cuda`) or the emulated device; an unknown name in
    /// `$EXECCRITIC_CUDA_DISABLE` is an error.
    pub fn open(kind: DeviceKind) -> Result<Gpu> {
        Switches::from_env().map_err(DeviceError::Unsupported)?;
        match kind {
            DeviceKind::Cuda(n) => Self::cuda(n),
            DeviceKind::Emulator => Self::emulator(),
        }
    }

    /// The real GPU `ordinal` (a typed error without the feature, driver or device).
    pub fn cuda(ordinal: usize) -> Result<Gpu> {
        #[cfg(feature = "cuda")]
        {
            Ok(Gpu::from_device(Arc::new(super::device::CudaDevice::new(
                ordinal,
            )?)))
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(DeviceError::NoDevice(format!(
                "cuda:{ordinal}: this binary was built without the `cuda` feature"
            )))
        }
    }

    /// The emulated device: the same kernels, compiled for the host, on CPU threads.
    pub fn emulator() -> Result<Gpu> {
        super::emulator()
    }

    /// The real GPU 0 when one is present, else the emulator — how the CUDA tests pick their
    /// device. `EXECCRITIC_REQUIRE_GPU=1` makes a missing GPU an error instead.
    pub fn auto() -> Result<Gpu> {
        Switches::from_env().map_err(DeviceError::Unsupported)?;
        match Self::cuda(0) {
            Ok(g) => Ok(g),
            Err(e) if std::env::var("EXECCRITIC_REQUIRE_GPU").as_deref() == Ok("1") => Err(e),
            Err(_) => Self::emulator(),
        }
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.dev
    }

    pub fn name(&self) -> String {
        self.dev.name()
    }

    /// Device buffer of `n` zeros (weights, caches and scratch are allocated up front).
    pub fn zeros<T: Elem>(&self, n: usize) -> Result<DeviceBuffer<T>> {
        bump(&self.counts.allocs);
        let ptr = self
            .dev
            .alloc_zeroed((n * std::mem::size_of::<T>()).max(1))?;
        Ok(DeviceBuffer {
            ptr,
            len: n,
            dev: self.dev.clone(),
            _t: PhantomData,
        })
    }

    /// Copy a host slice to a new device buffer.
    pub fn upload<T: Elem>(&self, x: &[T]) -> Result<DeviceBuffer<T>> {
        let b = self.zeros::<T>(x.len())?;
        if !x.is_empty() {
            self.dev.copy_htod(b.ptr, bytes(x))?;
        }
        Ok(b)
    }

    /// Overwrite the start of `dst` with `x`.
    pub fn write<T: Elem>(&self, dst: &mut DeviceBuffer<T>, x: &[T]) -> Result<()> {
        self.write_at(dst, 0, x)
    }

    /// Overwrite elements `at..at + x.len()` of `dst` with `x`.
    pub fn write_at<T: Elem>(&self, dst: &mut DeviceBuffer<T>, at: usize, x: &[T]) -> Result<()> {
        if at + x.len() > dst.len {
            return Err(DeviceError::Shape {
                op: "write",
                msg: format!("{} elements at {at} into a buffer of {}", x.len(), dst.len),
            });
        }
        if x.is_empty() {
            return Ok(());
        }
        self.dev.copy_htod(dst.ptr_at(at), bytes(x))
    }

    /// Copy a device buffer back (waits for the work enqueued before).
    pub fn download<T: Elem>(&self, x: &DeviceBuffer<T>) -> Result<Vec<T>> {
        self.download_prefix(x, x.len)
    }

    /// Copy the first `n` elements back.
    pub fn download_prefix<T: Elem>(&self, x: &DeviceBuffer<T>, n: usize) -> Result<Vec<T>> {
        if n > x.len {
            return Err(DeviceError::Shape {
                op: "download",
                msg: format!("{n} elements of a buffer of {}", x.len),
            });
        }
        let mut out = vec![T::default(); n];
        if n > 0 {
            self.dev.copy_dtoh(x.ptr, bytes_mut(&mut out))?;
        }
        Ok(out)
    }

    /// A new buffer with the same contents.
    pub fn duplicate<T: Elem>(&self, x: &DeviceBuffer<T>) -> Result<DeviceBuffer<T>> {
        let b = self.zeros::<T>(x.len)?;
        if x.len > 0 {
            self.dev
                .copy_dtod(b.ptr, x.ptr, x.len * std::mem::size_of::<T>())?;
        }
        Ok(b)
    }

    /// Copy `n` elements of `x` from element `src` to element `dst` (ranges must not overlap).
    pub fn copy_within<T: Elem>(
        &self,
        x: &mut DeviceBuffer<T>,
        src: usize,
        dst: usize,
        n: usize,
    ) -> Result<()> {
        let overlap = src < dst + n && dst < src + n;
        if src + n > x.len || dst + n > x.len || (overlap && n > 0) {
            return Err(DeviceError::Shape {
                op: "copy_within",
                msg: format!("{n} elements from {src} to {dst} in a buffer of {}", x.len),
            });
        }
        if n == 0 {
            return Ok(());
        }
        let sz = std::mem::size_of::<T>();
        self.dev.copy_dtod(x.ptr_at(dst), x.ptr_at(src), n * sz)
    }

    /// Zero elements `range` of `x` on the device.
    pub fn zero_range<T: Elem>(
        &self,
        x: &mut DeviceBuffer<T>,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        if range.start > range.end || range.end > x.len {
            return Err(DeviceError::Shape {
                op: "zero_range",
                msg: format!("{range:?} of a buffer of {}", x.len),
            });
        }
        let sz = std::mem::size_of::<T>();
        bump(&self.counts.memsets);
        self.dev
            .memset_zero(x.ptr_at(range.start), (range.end - range.start) * sz)
    }

    /// Launch kernel `name` with `args` (see the `launch!` macro of `ops`).
    pub fn launch(&self, name: &str, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        bump(&self.counts.launches);
        self.dev.launch(name, dims, args)
    }

    pub fn gemm(&self, g: &Gemm) -> Result<()> {
        bump(&self.counts.gemms);
        self.dev.gemm(g)
    }

    pub fn sync(&self) -> Result<()> {
        self.dev.synchronize()
    }

    /// Copy elements `range` of `x` back (waits for the work enqueued before).
    pub fn download_range<T: Elem>(
        &self,
        x: &DeviceBuffer<T>,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<T>> {
        if range.start > range.end || range.end > x.len {
            return Err(DeviceError::Shape {
                op: "download",
                msg: format!("{range:?} of a buffer of {}", x.len),
            });
        }
        let mut out = vec![T::default(); range.end - range.start];
        if !out.is_empty() {
            self.dev.copy_dtoh(x.ptr_at(range.start), bytes_mut(&mut out))?;
        }
        Ok(out)
    }

    /// Copy `n` elements of `src` from element `from` into `dst` at element `to`, on the device.
    pub fn copy_into<T: Elem>(
        &self,
        src: &DeviceBuffer<T>,
        from: usize,
        dst: &mut DeviceBuffer<T>,
        to: usize,
        n: usize,
    ) -> Result<()> {
        if from + n > src.len || to + n > dst.len {
            return Err(DeviceError::Shape {
                op: "copy_into",
                msg: format!(
                    "{n} elements from {from} of {} to {to} of {}",
                    src.len, dst.len
                ),
            });
        }
        if n == 0 {
            return Ok(());
        }
        let sz = std::mem::size_of::<T>();
        self.dev.copy_dtod(dst.ptr_at(to), src.ptr_at(from), n * sz)
    }
}
