//! The emulated CUDA device: runs the very `kernels/*.cu` sources on the CPU, so the CUDA host
//! code and every kernel are executed and checked in CI without a GPU.
//!
//! The kernels are compiled at build time (`build.rs`) by the host C++ compiler against
//! `kernels/emu/cuda_emu.h`; each CUDA thread of a block is a fiber (or, in the sanitizer builds,
//! an OS thread) and `__syncthreads`, warp shuffles and votes are real rendezvous among them
//! (`kernels/emu/runtime.cpp`). A barrier skipped by some threads of a block, divergent barriers
//! and warp-mask mismatches are reported as [`DeviceError::Launch`] naming the kernel. Launch
//! limits are those of an sm_90 (H200). GEMMs go to a CPU GEMM with cuBLAS's types ([`gemm`]).
//! Device memory is one host allocation per buffer ([`memory`]). All work is synchronous, so the
//! one-stream order of the real device holds trivially. See docs/cuda.md, "The emulated device".

pub mod gemm;
mod graph;
pub mod memory;

use std::ffi::{c_char, CStr, CString};
use std::sync::Mutex;

use crate::tensor::device::{
    DevPtr, Device, DeviceError, Gemm, GraphId, KernelArg, LaunchDims, MemoryUsage, Result,
};

use memory::Memory;

/// sm_90 launch limits (CUDA C Programming Guide, compute capability 9.0).
pub mod limits {
    /// Threads per block.
    pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
    /// Block dimensions x, y, z.
    pub const MAX_BLOCK: (u32, u32, u32) = (1024, 1024, 64);
    /// Grid dimensions x, y, z.
    pub const MAX_GRID: (u32, u32, u32) = (i32::MAX as u32, 65535, 65535);
    /// Dynamic shared memory a launch gets without `cuFuncSetAttribute(
    /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`, which the device seam does not expose.
    pub const MAX_DYNAMIC_SHARED_DEFAULT: u32 = 48 * 1024;
    /// Shared memory per block with that opt-in (static + dynamic).
    pub const MAX_SHARED_OPT_IN: u32 = 227 * 1024;
}

#[repr(C)]
struct RawArg {
    tag: u32,
    bits: u64,
}

/// `execcritic_emu_launch` (below), as a pointer.
type LaunchFn = unsafe extern "C" fn(*const c_char, *const u32, *const u32, u32, *const RawArg, usize, *mut c_char, usize) -> i32;
type NameFn = unsafe extern "C" fn(i: usize) -> *const c_char;
type InfoFn = unsafe extern "C" fn() -> *const c_char;

extern "C" {
    fn execcritic_emu_launch(
        name: *const c_char,
        grid: *const u32,
        block: *const u32,
        shared: u32,
        args: *const RawArg,
        nargs: usize,
        err: *mut c_char,
        errcap: usize,
    ) -> i32;
    fn execcritic_emu_kernel_name(i: usize) -> *const c_char;
    fn execcritic_emu_engine() -> *const c_char;
    fn execcritic_emu_sanitizer() -> *const c_char;
}

/// The kernels' C ABI (`kernels/emu/runtime.cpp`): the build linked into this binary, or, where
/// `EXECCRITIC_EMU_LIBRARY` names one, a shared build of the same sources loaded at start — as a
/// real device loads a module. `scripts/emu-sanitize.sh` builds the kernels that way under
/// AddressSanitizer and ThreadSanitizer and runs the same test binary against them, so the
/// sanitizer pass compiles the kernels only, never this crate.
struct Api {
    launch: LaunchFn,
    kernel_name: NameFn,
    engine: InfoFn,
    sanitizer: InfoFn,
}

/// The environment variable naming a shared build of the kernels to use instead of the linked one.
pub const LIBRARY_ENV: &str = "EXECCRITIC_EMU_LIBRARY";

fn api() -> std::result::Result<&'static Api, &'static str> {
    static API: std::sync::OnceLock<std::result::Result<Api, String>> = std::sync::OnceLock::new();
    API.get_or_init(|| match std::env::var_os(LIBRARY_ENV) {
        None => Ok(Api {
            launch: execcritic_emu_launch,
            kernel_name: execcritic_emu_kernel_name,
            engine: execcritic_emu_engine,
            sanitizer: execcritic_emu_sanitizer,
        }),
        Some(path) => load_library(std::path::Path::new(&path)),
    })
    .as_ref()
    .map_err(|e| e.as_str())
}

/// dlopen a shared build of the kernels (local symbols: it is used only through these four).
fn load_library(path: &std::path::Path) -> std::result::Result<Api, String> {
    use std::os::unix::ffi::OsStrExt;
    let what = || format!("{LIBRARY_ENV}={}", path.display());
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("{}: a NUL in the path", what()))?;
    let dl_error = || {
        // SAFETY: dlerror returns null or a NUL-terminated message owned by libc.
        let e = unsafe { libc::dlerror() };
        if e.is_null() {
            "unknown dlopen error".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated.
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        }
    };
    // SAFETY: plain dlopen of a shared library; the handle is kept for the process.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(format!("{}: {}", what(), dl_error()));
    }
    let sym = |name: &str| {
        let n = CString::new(name).expect("a symbol name");
        // SAFETY: a valid handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(h, n.as_ptr()) };
        if p.is_null() {
            Err(format!("{}: no symbol {name}: {}", what(), dl_error()))
        } else {
            Ok(p)
        }
    };
    // SAFETY: the symbols are the C functions of kernels/emu/runtime.cpp with these signatures.
    unsafe {
        Ok(Api {
            launch: std::mem::transmute::<*mut libc::c_void, LaunchFn>(sym("execcritic_emu_launch")?),
            kernel_name: std::mem::transmute::<*mut libc::c_void, NameFn>(sym("execcritic_emu_kernel_name")?),
            engine: std::mem::transmute::<*mut libc::c_void, InfoFn>(sym("execcritic_emu_engine")?),
            sanitizer: std::mem::transmute::<*mut libc::c_void, InfoFn>(sym("execcritic_emu_sanitizer")?),
        })
    }
}

/// A static NUL-terminated string from the C side.
fn info(f: impl FnOnce(&Api) -> InfoFn) -> &'static str {
    match api() {
        // SAFETY: the C side returns a static NUL-terminated string.
        Ok(a) => unsafe { CStr::from_ptr(f(a)()) }.to_str().unwrap_or("unknown"),
        Err(_) => "unknown",
    }
}

fn raw(a: &KernelArg) -> RawArg {
    let (tag, bits) = match *a {
        KernelArg::Ptr(p) => (b'p', p),
        KernelArg::I32(v) => (b'i', v as u32 as u64),
        KernelArg::U32(v) => (b'u', v as u64),
        KernelArg::I64(v) => (b'l', v as u64),
        KernelArg::U64(v) => (b'U', v),
        KernelArg::F32(v) => (b'f', v.to_bits() as u64),
    };
    RawArg {
        tag: tag as u32,
        bits,
    }
}

/// Checks a launch against the sm_90 limits; the message says which limit.
pub fn check_launch_limits(dims: &LaunchDims) -> std::result::Result<(), String> {
    use limits::*;
    let (b, g) = (dims.block, dims.grid);
    if b.0 == 0 || b.1 == 0 || b.2 == 0 || g.0 == 0 || g.1 == 0 || g.2 == 0 {
        return Err(format!("empty launch {dims}"));
    }
    let threads = b.0 as u64 * b.1 as u64 * b.2 as u64;
    if threads > MAX_THREADS_PER_BLOCK as u64 {
        return Err(format!(
            "{threads} threads per block > {MAX_THREADS_PER_BLOCK} (sm_90)"
        ));
    }
    if b.0 > MAX_BLOCK.0 || b.1 > MAX_BLOCK.1 || b.2 > MAX_BLOCK.2 {
        return Err(format!(
            "block {:?} exceeds the sm_90 block dimensions {:?}",
            b, MAX_BLOCK
        ));
    }
    if g.0 > MAX_GRID.0 || g.1 > MAX_GRID.1 || g.2 > MAX_GRID.2 {
        return Err(format!(
            "grid {:?} exceeds the sm_90 grid dimensions {:?}",
            g, MAX_GRID
        ));
    }
    if dims.shared_bytes > MAX_DYNAMIC_SHARED_DEFAULT {
        return Err(format!(
            "{} bytes of dynamic shared memory > {MAX_DYNAMIC_SHARED_DEFAULT} without the \
             MAX_DYNAMIC_SHARED_SIZE_BYTES opt-in (up to {MAX_SHARED_OPT_IN} on sm_90)",
            dims.shared_bytes
        ));
    }
    Ok(())
}

/// The emulated device. Cheap to create; kernels are linked into the binary (or loaded from
/// `EXECCRITIC_EMU_LIBRARY`).
#[derive(Default)]
pub struct EmuDevice {
    mem: Memory,
    /// A failure of a call that cannot return one (`free`), reported by the next `synchronize`
    /// (as CUDA's sticky errors).
    sticky: Mutex<Option<DeviceError>>,
    /// CUDA graphs: the capture in progress and the captured graphs.
    graphs: graph::Recorder,
}

impl EmuDevice {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every kernel the emulator can launch (all `kernels/*.cu` entry points, plus the
    /// deliberately broken test kernels of `tests/fixtures/emu`).
    pub fn kernel_names() -> Vec<String> {
        let Ok(api) = api() else { return vec![] };
        let mut names = vec![];
        for i in 0.. {
            // SAFETY: returns a static NUL-terminated name or null past the end.
            let p = unsafe { (api.kernel_name)(i) };
            if p.is_null() {
                break;
            }
            // SAFETY: non-null, static, NUL-terminated.
            names.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
        names
    }

    /// The execution engine of the kernels in use: `"fibers"` or `"os-threads"`.
    pub fn engine() -> &'static str {
        info(|a| a.engine)
    }

    /// The sanitizer the kernels in use were built with (`address`, `thread`), as their compiler
    /// says (`__SANITIZE_ADDRESS__`, `__SANITIZE_THREAD__`).
    pub fn sanitizer() -> Option<&'static str> {
        Some(info(|a| a.sanitizer)).filter(|s| !s.is_empty())
    }

    /// Where the kernels in use come from: `Err` where `EXECCRITIC_EMU_LIBRARY` names a library
    /// that cannot be loaded (every launch then fails with that message).
    pub fn library() -> std::result::Result<Option<std::path::PathBuf>, String> {
        api().map_err(str::to_string)?;
        Ok(std::env::var_os(LIBRARY_ENV).map(std::path::PathBuf::from))
    }

    /// Number of live allocations (for leak checks in tests).
    pub fn live_allocations(&self) -> usize {
        self.mem.live()
    }

    /// Bytes held by the live allocations (for memory accounting in tests).
    pub fn live_bytes(&self) -> usize {
        self.mem.live_bytes()
    }

    /// The most bytes held at once since creation or [`EmuDevice::reset_peak`].
    pub fn peak_bytes(&self) -> usize {
        self.mem.peak_bytes()
    }

    /// Start a new high-water mark ([`EmuDevice::peak_bytes`]) from the bytes held now.
    pub fn reset_peak(&self) {
        self.mem.reset_peak()
    }

    fn launch_err(kernel: &str, msg: String) -> DeviceError {
        DeviceError::Launch {
            kernel: kernel.to_string(),
            msg,
        }
    }
}

impl Device for EmuDevice {
    fn name(&self) -> String {
        format!("emulator (sm_90 limits, {})", Self::engine())
    }

    fn memory_usage(&self) -> Option<MemoryUsage> {
        let in_use = self.live_bytes() as u64;
        Some(MemoryUsage { in_use, peak: self.peak_bytes() as u64, reserved: in_use })
    }

    fn reset_memory_peak(&self) {
        self.reset_peak()
    }

    fn alloc_zeroed(&self, bytes: usize) -> Result<DevPtr> {
        self.mem.alloc_zeroed(bytes)
    }

    fn free(&self, ptr: DevPtr) {
        if let Err(e) = self.mem.free(ptr) {
            tracing::error!("emulated device: {e}");
            let mut s = self.sticky.lock().unwrap_or_else(|e| e.into_inner());
            s.get_or_insert(e);
        }
    }

    fn copy_htod(&self, dst: DevPtr, src: &[u8]) -> Result<()> {
        self.graphs.refuse_host_copy("copy host to device")?;
        self.mem.check(dst, src.len(), "copy host to device")?;
        // SAFETY: the destination range lies inside one live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    fn copy_dtoh(&self, src: DevPtr, dst: &mut [u8]) -> Result<()> {
        self.graphs.refuse_host_copy("copy device to host")?;
        self.mem.check(src, dst.len(), "copy device to host")?;
        // SAFETY: the source range lies inside one live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn copy_dtod(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<()> {
        if self
            .graphs
            .record(|| graph::Recorded::CopyDtoD { dst, src, bytes })
        {
            return Ok(());
        }
        self.mem
            .check(src, bytes, "copy device to device (source)")?;
        self.mem
            .check(dst, bytes, "copy device to device (destination)")?;
        // SAFETY: both ranges lie inside live allocations.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
        Ok(())
    }

    fn memset_zero(&self, dst: DevPtr, bytes: usize) -> Result<()> {
        if self.graphs.record(|| graph::Recorded::Memset(dst, bytes)) {
            return Ok(());
        }
        self.mem.check(dst, bytes, "memset")?;
        // SAFETY: the range lies inside one live allocation.
        unsafe { std::ptr::write_bytes(dst as *mut u8, 0, bytes) };
        Ok(())
    }

    fn launch(&self, kernel: &str, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        check_launch_limits(&dims).map_err(|m| Self::launch_err(kernel, format!("{dims}: {m}")))?;
        if self
            .graphs
            .record(|| graph::Recorded::Launch(kernel.to_string(), dims, args.to_vec()))
        {
            return Ok(());
        }
        for (i, a) in args.iter().enumerate() {
            if let KernelArg::Ptr(p) = *a {
                if !self.mem.is_valid_arg(p) {
                    return Err(Self::launch_err(
                        kernel,
                        format!("argument {i}: 0x{p:x} is not null and not in any live allocation"),
                    ));
                }
            }
        }
        let name =
            CString::new(kernel).map_err(|_| DeviceError::MissingKernel(kernel.to_string()))?;
        let raw: Vec<RawArg> = args.iter().map(raw).collect();
        let grid = [dims.grid.0, dims.grid.1, dims.grid.2];
        let block = [dims.block.0, dims.block.1, dims.block.2];
        let mut err = vec![0u8; 2048];
        let api = api().map_err(|e| Self::launch_err(kernel, e.to_string()))?;
        // SAFETY: every pointer is valid for the call; the C++ side catches its exceptions and
        // writes at most `err.len()` bytes, NUL-terminated.
        let rc = unsafe {
            (api.launch)(
                name.as_ptr(),
                grid.as_ptr(),
                block.as_ptr(),
                dims.shared_bytes,
                raw.as_ptr(),
                raw.len(),
                err.as_mut_ptr() as *mut c_char,
                err.len(),
            )
        };
        let msg = || {
            let end = err.iter().position(|&b| b == 0).unwrap_or(err.len());
            String::from_utf8_lossy(&err[..end]).into_owned()
        };
        match rc {
            0 => Ok(()),
            1 => Err(DeviceError::MissingKernel(kernel.to_string())),
            2 => Err(Self::launch_err(
                kernel,
                format!("{dims}: bad arguments: {}", msg()),
            )),
            _ => Err(Self::launch_err(kernel, format!("{dims}: {}", msg()))),
        }
    }

    fn gemm(&self, g: &Gemm) -> Result<()> {
        if self.graphs.record(|| graph::Recorded::Gemm(*g)) {
            return Ok(());
        }
        gemm::gemm(&self.mem, g)
    }

    fn begin_capture(&self) -> Result<()> {
        self.graphs.begin()
    }

    fn end_capture(&self) -> Result<GraphId> {
        self.graphs.end()
    }

    fn launch_graph(&self, id: GraphId) -> Result<()> {
        for op in self.graphs.ops(id)? {
            match op {
                graph::Recorded::Launch(k, dims, args) => self.launch(&k, dims, &args)?,
                graph::Recorded::Gemm(g) => self.gemm(&g)?,
                graph::Recorded::Memset(dst, bytes) => self.memset_zero(dst, bytes)?,
                graph::Recorded::CopyDtoD { dst, src, bytes } => self.copy_dtod(dst, src, bytes)?,
            }
        }
        Ok(())
    }

    fn drop_graph(&self, id: GraphId) {
        self.graphs.drop_graph(id)
    }

    fn synchronize(&self) -> Result<()> {
        match self.sticky.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
