//! Device memory of the emulated device: every allocation is its own zeroed host allocation
//! (so AddressSanitizer sees each buffer's bounds), tracked by base address, so that a copy, a
//! kernel pointer argument or a free that names memory the device never handed out is a typed
//! error instead of a silent corruption.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::tensor::device::{DevPtr, DeviceError, Result};

/// Alignment of every allocation (`cudaMalloc` returns 256-byte aligned pointers).
const ALIGN: usize = 256;

/// The live allocations: base address → size in bytes.
#[derive(Default)]
pub struct Memory {
    allocs: Mutex<BTreeMap<DevPtr, usize>>,
    /// Bytes held now and the most held at once since creation or [`Memory::reset_peak`].
    held: AtomicUsize,
    peak: AtomicUsize,
}

fn layout(bytes: usize) -> Result<Layout> {
    Layout::from_size_align(bytes.max(1), ALIGN).map_err(|_| DeviceError::OutOfMemory(bytes))
}

impl Memory {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<DevPtr, usize>> {
        // A poisoned map is still consistent: every update is a single insert or remove.
        self.allocs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new zero-filled allocation of at least one byte.
    pub fn alloc_zeroed(&self, bytes: usize) -> Result<DevPtr> {
        let l = layout(bytes)?;
        // SAFETY: `l` has a non-zero size.
        let p = unsafe { alloc_zeroed(l) };
        if p.is_null() {
            return Err(DeviceError::OutOfMemory(bytes));
        }
        self.map().insert(p as DevPtr, l.size());
        let now = self.held.fetch_add(l.size(), Ordering::SeqCst) + l.size();
        self.peak.fetch_max(now, Ordering::SeqCst);
        Ok(p as DevPtr)
    }

    /// Frees an allocation; `ptr` must be the base of a live one.
    pub fn free(&self, ptr: DevPtr) -> Result<()> {
        let size = self.map().remove(&ptr).ok_or_else(|| {
            DeviceError::Driver(format!("free of 0x{ptr:x}, which is not a live allocation"))
        })?;
        self.held.fetch_sub(size, Ordering::SeqCst);
        // SAFETY: `ptr` was returned by `alloc_zeroed` with this layout and is removed from the map.
        unsafe { dealloc(ptr as *mut u8, layout(size)?) };
        Ok(())
    }

    /// The allocation (base, size) that contains `ptr`, if any (one past the end counts).
    fn containing(&self, ptr: DevPtr) -> Option<(DevPtr, usize)> {
        let map = self.map();
        let (&base, &size) = map.range(..=ptr).next_back()?;
        (ptr <= base + size as u64).then_some((base, size))
    }

    /// Checks that `[ptr, ptr + bytes)` lies inside one live allocation.
    pub fn check(&self, ptr: DevPtr, bytes: usize, what: &str) -> Result<()> {
        match self.containing(ptr) {
            Some((base, size)) if ptr + bytes as u64 <= base + size as u64 => Ok(()),
            Some((base, size)) => Err(DeviceError::Driver(format!(
                "{what}: {bytes} bytes at 0x{ptr:x} run past the end of the {size}-byte allocation at 0x{base:x}"
            ))),
            None => Err(DeviceError::Driver(format!("{what}: 0x{ptr:x} is not in any live allocation"))),
        }
    }

    /// Whether `ptr` is null or points into (or one past) a live allocation.
    pub fn is_valid_arg(&self, ptr: DevPtr) -> bool {
        ptr == 0 || self.containing(ptr).is_some()
    }

    /// Number of live allocations.
    pub fn live(&self) -> usize {
        self.map().len()
    }

    /// Bytes held by the live allocations.
    pub fn live_bytes(&self) -> usize {
        self.map().values().sum()
    }

    /// The most bytes held at once since the device was created or the last
    /// [`Memory::reset_peak`] (the high-water mark, for memory accounting in tests).
    pub fn peak_bytes(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// Start a new high-water mark from the bytes held now.
    pub fn reset_peak(&self) {
        self.peak.store(self.held.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        let map = std::mem::take(&mut *self.map());
        for (ptr, size) in map {
            if let Ok(l) = layout(size) {
                // SAFETY: every entry is a live allocation made with this layout.
                unsafe { dealloc(ptr as *mut u8, l) };
            }
        }
    }
}
