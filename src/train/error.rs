//! `TrainError`: every way a training computation can fail on bad input (model loading, token
//! ids, loss inputs of mismatched sizes, checkpoint I/O), each naming the offending item.

use crate::model::ModelError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("cannot access {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("invalid training input: {0}")]
    BadInput(String),
    #[error("cannot take the lent weights back: {count} still referenced ({first}); stop the engine and drop the model first")]
    StillLent { count: usize, first: String },
    #[error("the trainer's weights are lent to an engine (or were lost while lent); give them back first")]
    WeightsAway,
    #[error(transparent)]
    Sampling(Box<super::dynamic::DynamicSamplingError<TrainError>>),
    #[error("engine: {0}")]
    Engine(#[from] crate::engine::EngineError),
    #[error("device: {0}")]
    Device(#[from] crate::tensor::device::DeviceError),
    #[error("cannot write safetensors {path}: {msg}")]
    Write { path: PathBuf, msg: String },
}

pub type Result<T> = std::result::Result<T, TrainError>;
