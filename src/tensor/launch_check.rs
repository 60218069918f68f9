//! The limits a kernel launch must respect — the device's (threads, block and grid dimensions,
//! shared memory per block with and without the opt-in, the register file) and the kernel's own
//! (its maximum threads per block, which the driver derives from its launch bounds and register
//! count, and its static shared memory) — and the one check the real device runs before every
//! launch ([`check_launch`]), so a launch the hardware would refuse is an error that names the
//! kernel and the numbers instead of a generic launch failure. The register arithmetic is shared
//! with the resource audit (`tensor::kernel_audit`), which applies it to compiled CUBINs in CI.

use crate::tensor::device::{DeviceError, LaunchDims};

/// Launch limits of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    pub threads_per_block: u32,
    pub block: (u32, u32, u32),
    pub grid: (u32, u32, u32),
    /// Shared memory (static + dynamic) a block gets without the opt-in.
    pub shared_default: u32,
    /// Shared memory per block with `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` raised
    /// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`).
    pub shared_opt_in: u32,
    /// 32-bit registers per block (`CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK`).
    pub registers_per_block: u32,
}

impl DeviceLimits {
    /// Compute capability 9.0 (H100/H200), CUDA C Programming Guide, "Technical
    /// Specifications per Compute Capability".
    pub const SM90: DeviceLimits = DeviceLimits {
        threads_per_block: 1024,
        block: (1024, 1024, 64),
        grid: (i32::MAX as u32, 65535, 65535),
        shared_default: 48 * 1024,
        shared_opt_in: 227 * 1024,
        registers_per_block: 65536,
    };
}

/// Registers are allocated per warp in units of 256 (8 per thread): a kernel using 68 holds 72.
pub const REGISTER_ALLOCATION_UNIT: u64 = 256;

/// Registers a block of `threads` threads holds when each uses `regs`: per warp `regs · 32`
/// rounded up to [`REGISTER_ALLOCATION_UNIT`], times the block's warps.
pub fn registers_per_block(regs: u32, threads: u64) -> u64 {
    let per_warp = (regs as u64 * 32).div_ceil(REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT;
    threads.div_ceil(32) * per_warp
}

/// The most threads per block (whole warps) a kernel using `regs` registers per thread can
/// launch with — what the driver reports as its `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`
/// (also capped by launch bounds, `bounds`).
pub fn max_threads_for(regs: u32, bounds: Option<u32>, dev: &DeviceLimits) -> u32 {
    let per_warp = registers_per_block(regs.max(1), 32);
    let warps = dev.registers_per_block as u64 / per_warp;
    let t = (warps * 32).min(dev.threads_per_block as u64) as u32;
    bounds.map_or(t, |b| t.min(b))
}

/// What the driver says about one loaded kernel (`cuFuncGetAttribute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncLimits {
    /// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
    pub max_threads: u32,
    /// `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`: static shared memory.
    pub static_shared: u32,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`: the dynamic shared memory a launch
    /// may take now (48 KiB − static until raised).
    pub max_dynamic_shared: u32,
}

/// Check one launch of `kernel` against the device's and the kernel's limits. `Ok(None)`: it
/// fits; `Ok(Some(n))`: it fits once the kernel's dynamic shared memory limit is raised to `n`
/// (the opt-in; the caller sets the attribute and remembers it); `Err`: a launch the hardware
/// would refuse, with the kernel's name and the numbers.
pub fn check_launch(kernel: &str, d: &LaunchDims, dev: &DeviceLimits, f: &FuncLimits) -> Result<Option<u32>, DeviceError> {
    let bad = |msg: String| Err(DeviceError::Launch { kernel: kernel.to_string(), msg: format!("{msg} {d}") });
    let (b, g) = (d.block, d.grid);
    let threads = b.0 as u64 * b.1 as u64 * b.2 as u64;
    if threads == 0 || g.0 == 0 || g.1 == 0 || g.2 == 0 {
        return bad("empty launch".into());
    }
    if b.0 > dev.block.0 || b.1 > dev.block.1 || b.2 > dev.block.2 || threads > dev.threads_per_block as u64 {
        return bad(format!(
            "block {b:?} ({threads} threads) exceeds the device's {} threads per block / {:?}",
            dev.threads_per_block, dev.block
        ));
    }
    if threads > f.max_threads as u64 {
        return bad(format!(
            "{threads} threads per block > its maximum of {} (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: \
             its launch bounds or registers per thread × threads exceed the register file)",
            f.max_threads
        ));
    }
    if g.0 > dev.grid.0 || g.1 > dev.grid.1 || g.2 > dev.grid.2 {
        return bad(format!("grid {g:?} exceeds the device's {:?}", dev.grid));
    }
    if d.shared_bytes <= f.max_dynamic_shared {
        return Ok(None);
    }
    let total = f.static_shared as u64 + d.shared_bytes as u64;
    if total > dev.shared_opt_in as u64 {
        return bad(format!(
            "{} bytes of dynamic + {} of static shared memory > the {} a block may have (opt-in)",
            d.shared_bytes, f.static_shared, dev.shared_opt_in
        ));
    }
    Ok(Some(d.shared_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(threads: u32, shared: u32) -> LaunchDims {
        LaunchDims { grid: (4, 1, 1), block: (threads, 1, 1), shared_bytes: shared }
    }

    #[test]
    fn register_file_arithmetic_matches_the_occupancy_rules() {
        // 68 registers are allocated as 72: 72 × 1024 = 73,728 > 65,536
        assert_eq!(registers_per_block(68, 1024), 73_728);
        assert_eq!(registers_per_block(64, 1024), 65_536);
        // 136 × 512 (the GDN decode kernel's first launch at 35B-A3B)
        assert_eq!(registers_per_block(134, 512), 69_632);
        // a partial warp holds a whole warp's registers
        assert_eq!(registers_per_block(32, 1), 1024);
        let sm90 = DeviceLimits::SM90;
        assert_eq!(max_threads_for(68, None, &sm90), 896);
        assert_eq!(max_threads_for(64, None, &sm90), 1024);
        assert_eq!(max_threads_for(134, None, &sm90), 480);
        assert_eq!(max_threads_for(32, Some(256), &sm90), 256);
    }

    #[test]
    fn launches_are_checked_against_the_kernels_own_limits() {
        let sm90 = DeviceLimits::SM90;
        let f = FuncLimits { max_threads: 896, static_shared: 32 * 1024, max_dynamic_shared: 16 * 1024 };
        assert_eq!(check_launch("k", &dims(896, 0), &sm90, &f), Ok(None));
        let e = check_launch("sample_tokens_f32", &dims(1024, 0), &sm90, &f).unwrap_err().to_string();
        assert!(e.contains("sample_tokens_f32") && e.contains("1024 threads") && e.contains("896"), "{e}");
        // more dynamic shared memory than the current limit: the opt-in, up to 227 KiB in all
        assert_eq!(check_launch("k", &dims(128, 16 * 1024), &sm90, &f), Ok(None));
        assert_eq!(check_launch("k", &dims(128, 100 * 1024), &sm90, &f), Ok(Some(100 * 1024)));
        let e = check_launch("k", &dims(128, 200 * 1024), &sm90, &f).unwrap_err().to_string();
        assert!(e.contains("204800 bytes of dynamic + 32768 of static"), "{e}");
        // device-wide limits
        assert!(check_launch("k", &dims(2048, 0), &sm90, &FuncLimits { max_threads: 4096, ..f }).is_err());
        let mut d = dims(32, 0);
        d.grid = (1, 70_000, 1);
        assert!(check_launch("k", &d, &sm90, &f).unwrap_err().to_string().contains("grid"));
        d.grid = (0, 1, 1);
        assert!(check_launch("k", &d, &sm90, &f).is_err());
    }
}
