//! Model layer: Qwen3.5-MoE config, safetensors weight loading (mmap), tokenizer and chat
//! template, tool-call parsing, and the forward pass of every layer type.

pub mod chat;
pub mod tokenizer;
pub mod toolcall;
