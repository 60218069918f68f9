//! Policy layer: the `Policy` trait (chats + sampling parameters in, completions out) and its
//! scripted, HTTP (OpenAI-compatible) and engine-backed implementations.
