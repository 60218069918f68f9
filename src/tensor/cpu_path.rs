//! The CPU instruction-set path of the engine, chosen once per process, and the table of kernels
//! that belongs to each path.
//!
//! Paths, best first: [`CpuPath::Amx`] (AMX `tdpbf16ps` tiles for many-row products with bf16
//! weights, see [`super::gemm_amx`]; everything else as avx512bf16), [`CpuPath::Avx512Bf16`]
//! (`vdpbf16ps` for bf16 weights, see [`super::gemm_bf16`]), [`CpuPath::Avx512F`] (packed
//! AVX-512 f32 GEMM, bf16 weights widened to f32), [`CpuPath::Avx2`] (AVX2+FMA kernels and the
//! `gemm` crate, bf16 widened) and [`CpuPath::Scalar`]. [`active`] is the best path the CPU
//! supports unless the environment variable `EXECCRITIC_CPU_PATH` (`amx`, `avx512bf16`,
//! `avx512f`, `avx2`, `scalar`) asks for a lower one; a request the CPU cannot run, or an unknown
//! name, is reported on stderr and ignored. Every
//! feature test of the CPU kernels ([`super::cpu::has_avx2`], [`super::cpu_avx512::available`])
//! goes through [`active`], so forcing a path moves the whole engine onto it.
//!
//! [`kernels_for`] returns the table of one path whatever [`active`] is, so tests can run every
//! path the CPU supports side by side in one process.
//!
//! **Activations of bf16 products** ([`Bf16Activations`]): on the avx512bf16 path many-row
//! products with bf16 weights round the activations to bf16 (PyTorch's native bf16 contract,
//! twice the multiply-add rate); [`Bf16Activations::F32`] keeps them exact (the widening kernel,
//! the contract of every other path, under which bf16 weights match transformers' f32 compute to
//! 1e-4; on the amx path the same contract on tiles, each activation split exactly into three bf16
//! parts, [`super::gemm_amx::matmul_t_exact`]). The default is `F32` on every path, so one command gives the same logits (to f32
//! rounding) on every CPU, and rollouts match the f32 trainer's log-probabilities.
//! `EXECCRITIC_BF16_ACTIVATIONS=bf16` or [`set_bf16_activations`] selects `Bf16` for the whole
//! process: on the AMX path that is where the speed is (bf16 prefill 2.05–2.23x transformers'
//! bf16, against 0.98x with exact activations on the widening kernel, on the machine measured,
//! benches/results/cpu-engine.md, before the exact tile kernel);
//! on the avx512bf16 path `vdpbf16ps` ran at the f32 FMA rate on the one such CPU measured.

use half::bf16;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// An instruction-set path, ordered from the least to the most capable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CpuPath {
    Scalar,
    Avx2,
    Avx512F,
    Avx512Bf16,
    Amx,
}

/// Environment variable that forces a (supported) lower path.
pub const ENV: &str = "EXECCRITIC_CPU_PATH";

impl CpuPath {
    /// Every path, best first.
    pub const ALL: [CpuPath; 5] =
        [CpuPath::Amx, CpuPath::Avx512Bf16, CpuPath::Avx512F, CpuPath::Avx2, CpuPath::Scalar];

    /// The name used by [`ENV`] and in benchmark reports.
    pub fn name(self) -> &'static str {
        match self {
            CpuPath::Scalar => "scalar",
            CpuPath::Avx2 => "avx2",
            CpuPath::Avx512F => "avx512f",
            CpuPath::Avx512Bf16 => "avx512bf16",
            CpuPath::Amx => "amx",
        }
    }

    /// The path called `s` (case-insensitive, `_` and `-` ignored), if any.
    pub fn parse(s: &str) -> Option<CpuPath> {
        let norm: String = s.chars().filter(|c| *c != '_' && *c != '-').collect::<String>().to_ascii_lowercase();
        CpuPath::ALL.into_iter().find(|p| p.name() == norm)
    }

    /// Whether this CPU can run the path (detected with `cpuid`; cached by std).
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
            let f = avx2 && std::is_x86_feature_detected!("avx512f");
            match self {
                CpuPath::Scalar => true,
                CpuPath::Avx2 => avx2,
                CpuPath::Avx512F => f,
                CpuPath::Avx512Bf16 => f && std::is_x86_feature_detected!("avx512bf16"),
                CpuPath::Amx => super::gemm_amx::available(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == CpuPath::Scalar
        }
    }

    /// The best path this CPU supports.
    pub fn best() -> CpuPath {
        CpuPath::ALL.into_iter().find(|p| p.supported()).unwrap_or(CpuPath::Scalar)
    }

    /// Nominal f32 floating-point operations per cycle and core (the f32 GEMM's limit: every path
    /// above AVX-512F multiplies f32 with AVX-512F).
    pub fn f32_flops_per_cycle(self) -> f64 {
        self.min(CpuPath::Avx512F).flops_per_cycle()
    }

    /// Whether the path's many-row bf16 kernel rounds the activations to bf16 under
    /// [`Bf16Activations::Bf16`] (the paths with bf16 dot products).
    pub fn rounds_activations(self) -> bool {
        self >= CpuPath::Avx512Bf16
    }

    /// Nominal floating-point operations per cycle and core of the path's large-GEMM inner loop:
    /// f32 lanes × 2 (multiply and add) × 2 (two vector FMA units), and twice that for bf16 dot
    /// products (`vdpbf16ps` does two multiply-adds per f32 lane). Scalar counts 2 FMA units. AMX:
    /// one `tdpbf16ps` (16 × 16 × 32 multiply-adds) every 16 cycles.
    pub fn flops_per_cycle(self) -> f64 {
        match self {
            CpuPath::Scalar => 4.0,
            CpuPath::Avx2 => 32.0,
            CpuPath::Avx512F => 64.0,
            CpuPath::Avx512Bf16 => 128.0,
            CpuPath::Amx => 1024.0,
        }
    }
}

/// The path the engine runs on (decided at the first call; see the module doc).
pub fn active() -> CpuPath {
    static ACTIVE: OnceLock<CpuPath> = OnceLock::new();
    *ACTIVE.get_or_init(|| choose(std::env::var(ENV).ok().as_deref()))
}

/// The path for an optional request (the value of [`ENV`]): the request when the CPU supports
/// it, else the best supported path (an unusable request is reported on stderr).
pub fn choose(request: Option<&str>) -> CpuPath {
    let best = CpuPath::best();
    let Some(req) = request.map(str::trim).filter(|s| !s.is_empty()) else {
        return best;
    };
    match CpuPath::parse(req) {
        Some(p) if p.supported() => p,
        Some(p) => {
            eprintln!("{ENV}={req}: this CPU cannot run the {} path; using {}", p.name(), best.name());
            best
        }
        None => {
            let names: Vec<&str> = CpuPath::ALL.iter().map(|p| p.name()).collect();
            eprintln!("{ENV}={req}: unknown path (one of {}); using {}", names.join(", "), best.name());
            best
        }
    }
}

/// Environment variable that selects the activation format of bf16 products (`bf16` or `f32`).
pub const ENV_ACTIVATIONS: &str = "EXECCRITIC_BF16_ACTIVATIONS";

/// What many-row products with bf16 weights do with the f32 activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Activations {
    /// Round them to bf16 (nearest even) where the path has bf16 dot products; f32 accumulation.
    Bf16,
    /// Keep them in f32 (weights widened exactly; results differ from f32 weights only by
    /// summation order).
    F32,
}

/// 0: not decided yet (read [`ENV_ACTIVATIONS`]), 1: `Bf16`, 2: `F32`.
static ACTIVATIONS: AtomicU8 = AtomicU8::new(0);

/// The process-wide activation format of bf16 products (see the module doc).
pub fn bf16_activations() -> Bf16Activations {
    match ACTIVATIONS.load(Ordering::Relaxed) {
        1 => Bf16Activations::Bf16,
        2 => Bf16Activations::F32,
        _ => {
            let v = std::env::var(ENV_ACTIVATIONS).unwrap_or_default();
            let a = if v.trim().eq_ignore_ascii_case("bf16") { Bf16Activations::Bf16 } else { Bf16Activations::F32 };
            set_bf16_activations(a);
            a
        }
    }
}

/// Select the activation format of bf16 products for the whole process (overrides the environment).
pub fn set_bf16_activations(a: Bf16Activations) {
    ACTIVATIONS.store(if a == Bf16Activations::Bf16 { 1 } else { 2 }, Ordering::Relaxed);
}

/// Many-row product with bf16 weights: `out[m, n] = x[m, k] · w[n, k]ᵀ` on up to `threads`
/// rayon workers; slice lengths are checked by the caller.
pub type MatmulBf16 = fn(x: &[f32], m: usize, k: usize, w: &[bf16], n: usize, out: &mut [f32], threads: usize);

/// The kernels of one path.
pub struct CpuKernels {
    pub path: CpuPath,
    /// Many-row (prefill, training) product with bf16 weights, activations per
    /// [`Bf16Activations::Bf16`] (rounded where the path has bf16 dot products).
    pub matmul_bf16: MatmulBf16,
    /// The same with the activations kept in f32 ([`Bf16Activations::F32`]).
    pub matmul_bf16_exact: MatmulBf16,
}

impl CpuKernels {
    /// The many-row bf16 kernel for the activation format `a`.
    pub fn matmul_bf16_for(&self, a: Bf16Activations) -> MatmulBf16 {
        match a {
            Bf16Activations::Bf16 => self.matmul_bf16,
            Bf16Activations::F32 => self.matmul_bf16_exact,
        }
    }
}

/// The widening kernel of each path (f32 activations, weights widened exactly).
macro_rules! widened {
    ($path:expr) => {
        |x, m, k, w, n, out, t| super::linear::matmul_bf16_widened($path, x, m, k, w, n, out, t)
    };
}

static TABLES: [CpuKernels; 5] = [
    CpuKernels {
        path: CpuPath::Amx,
        matmul_bf16: super::gemm_amx::matmul_t,
        matmul_bf16_exact: super::gemm_amx::matmul_t_exact,
    },
    CpuKernels {
        path: CpuPath::Avx512Bf16,
        matmul_bf16: super::gemm_bf16::matmul_t,
        matmul_bf16_exact: widened!(CpuPath::Avx512F),
    },
    CpuKernels {
        path: CpuPath::Avx512F,
        matmul_bf16: widened!(CpuPath::Avx512F),
        matmul_bf16_exact: widened!(CpuPath::Avx512F),
    },
    CpuKernels { path: CpuPath::Avx2, matmul_bf16: widened!(CpuPath::Avx2), matmul_bf16_exact: widened!(CpuPath::Avx2) },
    CpuKernels {
        path: CpuPath::Scalar,
        matmul_bf16: widened!(CpuPath::Scalar),
        matmul_bf16_exact: widened!(CpuPath::Scalar),
    },
];

/// The kernel table of `path`, or `None` when the CPU cannot run it.
pub fn kernels_for(path: CpuPath) -> Option<&'static CpuKernels> {
    if !path.supported() {
        return None;
    }
    TABLES.iter().find(|t| t.path == path)
}

/// The kernel table of the [`active`] path.
pub fn kernels() -> &'static CpuKernels {
    static K: OnceLock<&'static CpuKernels> = OnceLock::new();
    K.get_or_init(|| kernels_for(active()).unwrap_or(&TABLES[4]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_requests_fall_back() {
        for p in CpuPath::ALL {
            assert_eq!(CpuPath::parse(p.name()), Some(p));
        }
        assert_eq!(CpuPath::parse("AVX512_BF16"), Some(CpuPath::Avx512Bf16));
        assert_eq!(CpuPath::parse("sse9"), None);
        assert_eq!(choose(None), CpuPath::best());
        assert_eq!(choose(Some("nonsense")), CpuPath::best());
        assert_eq!(choose(Some("scalar")), CpuPath::Scalar);
        for p in CpuPath::ALL {
            let want = if p.supported() { p } else { CpuPath::best() };
            assert_eq!(choose(Some(p.name())), want);
            assert_eq!(kernels_for(p).map(|k| k.path), p.supported().then_some(p));
        }
        assert!(active() <= CpuPath::best());
        assert_eq!(CpuPath::Amx.f32_flops_per_cycle(), 64.0);
        assert!(CpuPath::Amx.rounds_activations() && !CpuPath::Avx512F.rounds_activations());
    }
}
