//! Where an engine runs: a device — `cpu`, `cuda` (GPU 0), `cuda:N`, `emulator` (the CUDA kernels
//! emulated on CPU threads) — and, on the CUDA backend, the storage type of weights and
//! activations (`bf16`, the default there, or `f32`), written `DEVICE[:DTYPE]`, e.g. `cuda:1`,
//! `emulator:f32`, `cuda:0:bf16`. The same words are used by `--device`/`--dtype`, by the
//! `engine:DIR@DEVICE[:DTYPE]` policy spec and by `device = "…"` in training configs.
//! [`open_engine`] starts an [`Engine`] on a model folder at a placement.

use super::core::EngineConfig;
use super::cuda_backend::CudaDecoder;
use super::error::EngineError;
use super::service::Engine;
use crate::model::backend::cuda::{CacheConfig, CudaModel};
use crate::tensor::cuda::{Act, ActType, DeviceKind, Gpu};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// A device to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    #[default]
    Cpu,
    Gpu(DeviceKind),
}

impl FromStr for DeviceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Gpu(DeviceKind::Cuda(0))),
            "emulator" | "emu" => Ok(DeviceChoice::Gpu(DeviceKind::Emulator)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceChoice::Gpu(DeviceKind::Cuda(n))),
                _ => Err(format!(
                    "unknown device {s:?} (cpu, cuda, cuda:N or emulator)"
                )),
            },
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceChoice::Cpu => write!(f, "cpu"),
            DeviceChoice::Gpu(DeviceKind::Cuda(n)) => write!(f, "cuda:{n}"),
            DeviceChoice::Gpu(DeviceKind::Emulator) => write!(f, "emulator"),
        }
    }
}

/// A device and (CUDA backend only) a storage type; `None` = the device's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Placement {
    pub device: DeviceChoice,
    pub dtype: Option<ActType>,
}

impl Placement {
    /// A placement with its combination checked (the CPU engine computes in f32 only).
    pub fn new(device: DeviceChoice, dtype: Option<ActType>) -> Result<Self, String> {
        if device == DeviceChoice::Cpu && dtype == Some(ActType::Bf16) {
            return Err(
                "dtype bf16 needs device cuda or emulator (the CPU engine computes in f32)".into(),
            );
        }
        Ok(Placement { device, dtype })
    }

    /// The storage type on the CUDA backend (bf16 unless f32 was asked for).
    pub fn act_type(&self) -> ActType {
        self.dtype.unwrap_or(ActType::Bf16)
    }
}

impl FromStr for Placement {
    type Err = String;
    /// `DEVICE` or `DEVICE:DTYPE` (`cuda:1:f32`, `emulator:bf16`, `cpu`).
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(device) = s.parse::<DeviceChoice>() {
            return Placement::new(device, None);
        }
        let (device, dtype) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("unknown device {s:?} (cpu, cuda, cuda:N or emulator)"))?;
        Placement::new(device.parse()?, Some(dtype.parse()?))
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dtype {
            None => write!(f, "{}", self.device),
            Some(t) => write!(f, "{}:{}", self.device, t.suffix()),
        }
    }
}

/// Longest sequence (prompt + completion tokens) of an engine on the CUDA backend opened for a
/// policy or for rollouts (a per-sequence limit: the paged KV pool is sized by [`device_cache`]).
pub const DEVICE_MAX_LEN: usize = 32_768;

/// `config` with the limits of an engine on the CUDA backend, whose caches are allocated up
/// front: at most 8 sequences in flight and 8 kept conversations.
pub fn device_config(config: EngineConfig) -> EngineConfig {
    let mut c = config;
    c.scheduler.max_running = c.scheduler.max_running.min(8);
    c.max_conversations = c.max_conversations.min(8);
    c
}

/// Cache slots a CUDA engine needs for `config`: two per running sequence (its state and, in a
/// conversation, its turn-boundary snapshot), plus the two snapshots (turn boundary and end of
/// generation) each kept conversation may hold.
pub fn device_slots(config: &EngineConfig) -> usize {
    2 * config.scheduler.max_running + 2 * config.max_conversations
}

/// The caches of a CUDA engine for `config` whose sequences hold at most `max_len` tokens:
/// [`device_slots`] sequence slots (GDN states, allocated up front) and a paged KV pool with a
/// token budget of `max_len` (plus two blocks) per running sequence and per kept conversation.
/// A snapshot shares its source's blocks (at most its partial last block is copied), and every
/// slot the engine holds is a running sequence, a kept conversation or a snapshot of one of
/// them, so this budget never runs out where one `max_len` allocation per slot (twice as many
/// tokens) would not.
pub fn device_cache(config: &EngineConfig, max_len: usize) -> CacheConfig {
    let bs = CacheConfig::BLOCK_SIZE;
    let families = config.scheduler.max_running + config.max_conversations;
    CacheConfig {
        slots: device_slots(config),
        max_len,
        kv_tokens: families.max(1) * (max_len.next_multiple_of(bs) + 2 * bs),
        block_size: bs,
    }
}

/// Start an engine on the model folder `dir` at `placement`. On the CUDA backend every sequence
/// may hold `max_len` tokens (prompt + completion); [`device_cache`] sizes the slots and the
/// paged KV pool, so keep `config.max_conversations` modest there.
pub fn open_engine(
    dir: &Path,
    placement: Placement,
    config: EngineConfig,
    max_len: usize,
) -> Result<Engine, EngineError> {
    fn on<A: Act>(
        dir: &Path,
        gpu: Gpu,
        config: EngineConfig,
        max_len: usize,
    ) -> Result<Engine, EngineError> {
        let model = CudaModel::<A>::load(&gpu, dir)
            .map_err(|e| EngineError::Load(format!("{} onto {}: {e}", dir.display(), gpu.name())))?;
        let cache = device_cache(&config, max_len);
        let decoder =
            CudaDecoder::with_cache(gpu, model, cache, config.scheduler.max_batch_tokens)?;
        Engine::load_with(dir, decoder, config)
    }
    match placement.device {
        DeviceChoice::Cpu => Engine::load(dir, config),
        DeviceChoice::Gpu(kind) => {
            let gpu = Gpu::open(kind)
                .map_err(|e| EngineError::Load(format!("opening device {placement}: {e}")))?;
            match placement.act_type() {
                ActType::Bf16 => on::<u16>(dir, gpu, config, max_len),
                ActType::F32 => on::<f32>(dir, gpu, config, max_len),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_parse_and_print() {
        let p = |s: &str| s.parse::<Placement>();
        let gpu = |n| DeviceChoice::Gpu(DeviceKind::Cuda(n));
        let emu = DeviceChoice::Gpu(DeviceKind::Emulator);
        for (s, device, dtype, shown) in [
            ("cpu", DeviceChoice::Cpu, None, "cpu"),
            ("cpu:f32", DeviceChoice::Cpu, Some(ActType::F32), "cpu:f32"),
            ("cuda", gpu(0), None, "cuda:0"),
            ("cuda:1", gpu(1), None, "cuda:1"),
            ("cuda:f32", gpu(0), Some(ActType::F32), "cuda:0:f32"),
            ("cuda:2:bf16", gpu(2), Some(ActType::Bf16), "cuda:2:bf16"),
            ("emulator", emu, None, "emulator"),
            ("emulator:f32", emu, Some(ActType::F32), "emulator:f32"),
        ] {
            let got = p(s).unwrap();
            assert_eq!((got.device, got.dtype), (device, dtype), "{s}");
            assert_eq!(got.to_string(), shown);
            assert_eq!(p(shown).unwrap(), got, "{shown} round-trips");
        }
        for bad in ["", "gpu", "cuda:", "cuda:x", "cpu:bf16", "emulator:f16", "cuda:1:2"] {
            assert!(p(bad).is_err(), "{bad}");
        }
        assert_eq!(p("emulator:bf16").unwrap().act_type(), ActType::Bf16);
        assert_eq!(p("cuda:3").unwrap().act_type(), ActType::Bf16);
    }

    #[test]
    fn the_device_kv_pool_is_a_token_budget_per_sequence_family() {
        let config = device_config(EngineConfig::default());
        let cache = device_cache(&config, DEVICE_MAX_LEN);
        let families = config.scheduler.max_running + config.max_conversations;
        assert_eq!(cache.slots, device_slots(&config));
        assert_eq!(cache.max_len, DEVICE_MAX_LEN);
        // room for every running sequence and kept conversation at full length (+ partial
        // blocks of their snapshots), half of one max_len region per slot
        assert!(cache.kv_tokens >= families * DEVICE_MAX_LEN);
        assert!(cache.kv_tokens < families * DEVICE_MAX_LEN + families * 3 * cache.block_size);
        assert!(2 * cache.kv_tokens <= cache.slots * (DEVICE_MAX_LEN + 2 * cache.block_size));
        assert_eq!(cache.kv_tokens % cache.block_size, 0);
        // a small engine (generate: no conversation, two sequences) gets a small pool
        let mut small = EngineConfig::default();
        small.scheduler.max_running = 2;
        small.max_conversations = 0;
        let c = device_cache(&small, 1000);
        assert_eq!(c.blocks() * c.block_size, c.kv_tokens);
        assert_eq!(c.kv_tokens, 2 * (1008 + 32));
    }
}
