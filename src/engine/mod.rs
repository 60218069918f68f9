//! Engine layer: batched generation over the model — continuous batching, per-sequence caches
//! (attention KV, Gated DeltaNet conv/recurrent state), sampling with log-probabilities, routing
//! records.
//!
//! * [`backend`]: the model interface the engine drives ([`DecoderModel`], implemented by
//!   [`crate::model::Model`]): a batched step that returns logits or samples the next tokens.
//! * [`sampler`]: greedy / temperature / top-k / top-p sampling with seeded ChaCha generators and
//!   the policy log-probability of every sampled token.
//! * [`sequence`]: requests, completions and per-sequence bookkeeping (stop tokens and strings).
//! * [`scheduler`]: which decode tokens and prefill chunks go into the next step.
//! * [`conversation`]: per-conversation state snapshots, so a new turn reads only its suffix.
//! * [`core`]: the synchronous step loop; [`service`]: the async front-end on its own thread;
//!   [`chat`]: render → generate → parse for chat messages.
//! * [`stats`]: token counters (prefilled, decoded, served from the cache); [`turns`]: the
//!   next agent turn's prompt as the conversation's own tokens plus the new messages.
//! * [`placement`]: `cpu` / `cuda[:N]` / `emulator` with a storage type, and [`open_engine`].
//! * [`cuda_backend`]: the CUDA backend (GPU or emulator) as a [`DecoderModel`];
//!   [`device_sampling`]: its next tokens drawn on the device.
//! * [`bench`]: the engine benchmark (decode, prefill and agent traffic against the roofline).

pub mod backend;
pub mod bench;
pub mod chat;
pub mod conversation;
pub mod core;
pub mod cuda_backend;
pub mod device_sampling;
pub mod error;
pub mod placement;
pub mod sampler;
pub mod scheduler;
pub mod sequence;
pub mod service;
pub mod stats;
pub mod turns;

pub use backend::{DecoderModel, SampleSpec, StepInput, StepOutput, Want};
pub use chat::{ChatCompletion, ChatRequest};
pub use core::{EngineConfig, EngineCore};
pub use error::EngineError;
pub use placement::{open_engine, DeviceChoice, Placement};
pub use sampler::{Sampled, Sampler, SamplingParams};
pub use scheduler::SchedulerConfig;
pub use sequence::{Completion, FinishReason, Request, RoutingRecord, Timing, TokenEvent, TokenSink};
pub use service::{Engine, LoadStats, PendingCompletion};
pub use stats::EngineStats;
