//! Model layer: Qwen3.5-MoE config, safetensors weight loading (mmap), tokenizer and chat
//! template, tool-call parsing, and the forward pass of every layer type.
//!
//! Entry point: [`Model::load`] a Hugging Face folder, [`Model::new_state`] per sequence, then
//! [`Model::forward`] a batch of [`SeqInput`]s (prefill of any length or one-token decode).

pub mod attention;
pub mod backend;
pub mod backward;
pub mod batch;
pub mod chat;
pub mod chat_python;
pub mod checkpoint;
pub mod config;
pub mod error;
pub mod files;
pub mod forward;
pub mod gdn;
pub mod layout;
pub mod moe;
pub mod qwen35;
pub mod rope;
pub mod source;
pub mod state;
pub mod tokenizer;
pub mod toolcall;

pub use batch::{ForwardOptions, LogitsMode, Routing, SeqInput, SeqOutput};
pub use config::{LayerType, ModelConfig};
pub use error::ModelError;
pub use qwen35::Model;
pub use state::SeqState;
