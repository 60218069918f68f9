//! Switches to plainer paths of the device code that need no rebuild: one environment variable,
//! `EXECCRITIC_CUDA_DISABLE`, read once per process, lists what to turn off, so a step that fails
//! on the GPU can be retried at once on a plainer path while the rest is still measured:
//!
//! | name | turns off | the plainer path |
//! |---|---|---|
//! | `graphs` | CUDA graph capture and replay of decode steps | every step launched directly |
//! | `device-sampling` | the `sample_tokens` kernel | logits rows to the host, the CPU sampler with the same draw |
//! | `mma-gemm` | the staged tensor-core expert GEMM (`grouped_gemm_mma`) | the fp32-FMA `grouped_gemm` (and SwiGLU as its own kernel) |
//! | `stream-gemm` | the weight-streaming tensor-core expert GEMM (`grouped_gemm_stream`) | the staged kernel (or FMA with `mma-gemm`) |
//! | `cp-async` | `cp.async` staging in `grouped_gemm_mma` | converting plain stores (still double-buffered) |
//!
//! e.g. `EXECCRITIC_CUDA_DISABLE=graphs,mma-gemm`; `all` turns everything off. Each plainer path
//! computes the same results (tests: `cuda_ops`, `cuda_model`, `engine_device`). A [`Gpu`] takes
//! the switches from the environment when it is opened ([`Switches::from_env`]); tests choose
//! them per handle (`Gpu::with_switches`).
//!
//! [`Gpu`]: super::Gpu

use std::sync::OnceLock;

/// The environment variable listing the paths to turn off.
pub const DISABLE_ENV: &str = "EXECCRITIC_CUDA_DISABLE";

/// Which optional paths are on (all by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switches {
    pub graphs: bool,
    pub device_sampling: bool,
    pub mma_gemm: bool,
    pub stream_gemm: bool,
    pub cp_async: bool,
}

impl Default for Switches {
    fn default() -> Switches {
        Switches { graphs: true, device_sampling: true, mma_gemm: true, stream_gemm: true, cp_async: true }
    }
}

/// The names `EXECCRITIC_CUDA_DISABLE` accepts.
pub const NAMES: &[&str] = &["graphs", "device-sampling", "mma-gemm", "stream-gemm", "cp-async", "all"];

impl Switches {
    /// Every optional path off.
    pub const PLAIN: Switches =
        Switches { graphs: false, device_sampling: false, mma_gemm: false, stream_gemm: false, cp_async: false };

    /// Parse a comma-separated list of [`NAMES`] to turn off (empty: nothing).
    pub fn parse(list: &str) -> Result<Switches, String> {
        let mut s = Switches::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "graphs" => s.graphs = false,
                "device-sampling" => s.device_sampling = false,
                "mma-gemm" => s.mma_gemm = false,
                "stream-gemm" => s.stream_gemm = false,
                "cp-async" => s.cp_async = false,
                "all" => s = Switches::PLAIN,
                other => {
                    return Err(format!("{DISABLE_ENV}: unknown path {other:?} (one of {})", NAMES.join(", ")))
                }
            }
        }
        Ok(s)
    }

    /// The switches of `$EXECCRITIC_CUDA_DISABLE`, read once per process; an unknown name is an
    /// error (every call reports it).
    pub fn from_env() -> Result<Switches, String> {
        static CELL: OnceLock<Result<Switches, String>> = OnceLock::new();
        CELL.get_or_init(|| {
            let s = Switches::parse(&std::env::var(DISABLE_ENV).unwrap_or_default());
            if let Ok(s) = &s {
                if *s != Switches::default() {
                    tracing::info!("{DISABLE_ENV}: running with {s:?}");
                }
            }
            s
        })
        .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_of_paths_turn_them_off() {
        assert_eq!(Switches::parse("").unwrap(), Switches::default());
        let s = Switches::parse("graphs, cp-async").unwrap();
        assert!(!s.graphs && !s.cp_async && s.mma_gemm && s.stream_gemm && s.device_sampling);
        assert_eq!(Switches::parse("all").unwrap(), Switches::PLAIN);
        let e = Switches::parse("graphs,tensor-cores").unwrap_err();
        assert!(e.contains("\"tensor-cores\"") && e.contains("mma-gemm"), "{e}");
    }
}
