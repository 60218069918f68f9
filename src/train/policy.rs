//! Lending the policy: the trainer's parameters become the engine's weights for a rollout
//! phase and come back for the update — one copy of the weights, handed between phases, no
//! copy and no disk (DESIGN.md: "the trainer updates the very weights the engine samples
//! from"). [`Trainer::lend`] moves the parameter buffers into a [`Model`] (via a
//! [`ParamLease`]) and starts an [`Engine`] on it; [`LentPolicy::give_back`] (or dropping the
//! [`LentPolicy`]) stops the engine, drops the model and reclaims every buffer, so the
//! trainer's `Pid`s and optimizer state stay valid. The lent policy borrows the trainer
//! mutably, so nothing can train on weights the engine is reading.

use super::error::{Result, TrainError};
use super::lease::ParamLease;
use super::trainer::Trainer;
use crate::engine::cuda_backend::CudaDecoder;
use crate::engine::placement::{device_cache, device_config, DEVICE_MAX_LEN};
use crate::engine::{DeviceChoice, Engine, EngineConfig, Placement};
use crate::model::backend::cuda::CudaModel;
use crate::tensor::cuda::{Act, ActType, Gpu};
use crate::model::chat::ChatTemplate;
use crate::model::tokenizer::Tokenizer;
use crate::model::Model;

/// A trainer whose weights are serving an engine.
pub struct LentPolicy<'t> {
    trainer: &'t mut Trainer,
    engine: Option<Engine>,
    lease: Option<ParamLease>,
}

impl Trainer {
    /// Start an engine on this trainer's weights (moved, not copied). On failure the weights
    /// are back in the trainer before the error is returned.
    pub fn lend(
        &mut self,
        tokenizer: Tokenizer,
        template: Option<ChatTemplate>,
        config: EngineConfig,
    ) -> Result<LentPolicy<'_>> {
        if self.model.store.is_empty() {
            return Err(TrainError::WeightsAway);
        }
        let mut lease = ParamLease::new(std::mem::take(&mut self.model.store));
        let built = Model::from_source(self.model.cfg.clone(), &mut lease)
            .map_err(TrainError::from)
            .and_then(|m| Engine::start(m, tokenizer, template, config).map_err(TrainError::from));
        match built {
            Ok(engine) => Ok(LentPolicy {
                trainer: self,
                engine: Some(engine),
                lease: Some(lease),
            }),
            Err(e) => {
                // The model, if it was built, is dropped by now: every buffer comes back.
                self.model.store = lease.reclaim()?;
                Err(e)
            }
        }
    }
}

impl Trainer {
    /// Run `f` on an engine serving this trainer's weights ([`Self::lend`]), then stop it and
    /// take the weights back.
    pub fn with_engine<R>(
        &mut self,
        tokenizer: Tokenizer,
        template: Option<ChatTemplate>,
        config: EngineConfig,
        f: impl FnOnce(&Engine) -> R,
    ) -> Result<R> {
        let lent = self.lend(tokenizer, template, config)?;
        let r = f(lent.engine());
        lent.give_back().map_err(|e| e.error)?;
        Ok(r)
    }

    /// Start an engine on a CUDA device (GPU or emulator) with a copy of this trainer's weights:
    /// one upload, after which the weights are back in the trainer, which may update them while
    /// the engine keeps sampling from the uploaded copy (rollouts on the device, the update where
    /// the trainer runs). The engine's limits are capped by [`device_config`].
    pub fn device_engine(
        &mut self,
        placement: Placement,
        tokenizer: Tokenizer,
        template: Option<ChatTemplate>,
        config: EngineConfig,
    ) -> Result<Engine> {
        let DeviceChoice::Gpu(kind) = placement.device else {
            return Err(TrainError::BadInput(format!("{placement} is not a CUDA device")));
        };
        if self.model.store.is_empty() {
            return Err(TrainError::WeightsAway);
        }
        let gpu = Gpu::open(kind)
            .map_err(|e| TrainError::BadInput(format!("opening device {placement}: {e}")))?;
        let config = device_config(config);
        let mut lease = ParamLease::new(std::mem::take(&mut self.model.store));
        let cfg = self.model.cfg.clone();
        let decoder = match placement.act_type() {
            ActType::Bf16 => upload::<u16>(gpu, cfg, &mut lease, &config).map(Decoder::Bf16),
            ActType::F32 => upload::<f32>(gpu, cfg, &mut lease, &config).map(Decoder::F32),
        };
        // Every uploaded tensor is dropped by now: the weights come back either way.
        self.model.store = lease.reclaim()?;
        match decoder? {
            Decoder::Bf16(d) => Ok(Engine::start(d, tokenizer, template, config)?),
            Decoder::F32(d) => Ok(Engine::start(d, tokenizer, template, config)?),
        }
    }
}

/// A device model in either storage type.
enum Decoder {
    Bf16(CudaDecoder<u16>),
    F32(CudaDecoder<f32>),
}

/// Upload the lent weights and allocate the engine's caches.
fn upload<A: Act>(
    gpu: Gpu,
    cfg: crate::model::config::ModelConfig,
    lease: &mut ParamLease,
    config: &EngineConfig,
) -> Result<CudaDecoder<A>> {
    let model = CudaModel::<A>::from_source(&gpu, cfg, lease)
        .map_err(|e| TrainError::BadInput(format!("uploading the weights to {}: {e}", gpu.name())))?;
    device_decoder(gpu, model, config)
}

/// A device model with the engine's caches (shaped by [`device_cache`]); `config` already
/// capped by [`device_config`].
pub(crate) fn device_decoder<A: Act>(gpu: Gpu, model: CudaModel<A>, config: &EngineConfig) -> Result<CudaDecoder<A>> {
    let cache = device_cache(config, DEVICE_MAX_LEN);
    Ok(CudaDecoder::with_cache(gpu, model, cache, config.scheduler.max_batch_tokens)?)
}

impl<'t> LentPolicy<'t> {
    /// The engine sampling from the lent weights. Its clones must be dropped before the
    /// weights are given back.
    pub fn engine(&self) -> &Engine {
        self.engine
            .as_ref()
            .expect("the engine is present until the policy is given back")
    }

    /// Stop the engine and put the weights back into the trainer. While another handle to
    /// the engine is alive this fails and hands the lent policy back: drop the handle, retry.
    pub fn give_back(mut self) -> std::result::Result<(), Box<GiveBackError<'t>>> {
        let handles = self.engine.as_ref().map_or(1, Engine::handles);
        if handles > 1 {
            let error = TrainError::StillLent {
                count: handles - 1,
                first: "engine handle(s) other than the lent policy's".into(),
            };
            return Err(Box::new(GiveBackError { error, policy: self }));
        }
        self.take_back().map_err(|error| {
            // Only reachable if the engine thread failed; the weights are then gone.
            Box::new(GiveBackError { error, policy: self })
        })
    }

    fn take_back(&mut self) -> Result<()> {
        let Some(engine) = self.engine.take() else {
            return Ok(());
        };
        let mut lease = self.lease.take().expect("lease and engine are taken together");
        // `stop` fails, changing nothing, while other handles exist.
        let model: Model = engine.stop()?;
        drop(model);
        self.trainer.model.store = lease.reclaim()?;
        Ok(())
    }
}

/// Why the weights could not be given back, with the still-lent policy.
#[derive(thiserror::Error)]
#[error("{error}")]
pub struct GiveBackError<'t> {
    pub error: TrainError,
    pub policy: LentPolicy<'t>,
}

impl std::fmt::Debug for GiveBackError<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GiveBackError({:?})", self.error)
    }
}

impl Drop for LentPolicy<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.take_back() {
            tracing::error!("the lent weights could not be taken back: {e}");
        }
    }
}
