//! `execcritic serve`: the OpenAI-compatible server (`crate::serve`) over the embedded engine,
//! bound to loopback unless told otherwise; stops on Ctrl-C / SIGTERM.

use super::model_cmds::{open_serving_engine, DeviceArgs};
use crate::serve::limits::TokenLimits;
use crate::serve::{AppState, ServeConfig};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Hugging Face model folder (config.json, safetensors, tokenizer.json, chat template).
    #[arg(long)]
    pub model: PathBuf,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Address to bind (loopback by default; 0.0.0.0 exposes the server to the network).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0 picks a free one; the bound address is printed on stdout).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The model name clients send (default: the model folder's name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Sequences the engine generates at once (continuous batching).
    #[arg(long, default_value_t = 64)]
    pub max_concurrency: usize,
    /// Sequences that may wait beyond those; more are refused with 429.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// Require `Authorization: Bearer KEY` on /v1/* (also read from EXECCRITIC_API_KEY).
    #[arg(long)]
    pub api_key: Option<String>,
    /// Context length (prompt + completion); default: the model's max_position_embeddings.
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// Largest max_tokens a request may ask for (and the default, capped by the context left).
    #[arg(long, default_value_t = 32768)]
    pub max_tokens_limit: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body_bytes: usize,
    /// Conversations whose model states the engine keeps for prefix reuse.
    #[arg(long, default_value_t = 256)]
    pub max_conversations: usize,
    /// Open connections at once; one more is closed unread.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Seconds a client may take to send a request head (or stay idle between requests).
    #[arg(long, default_value_t = 30.0)]
    pub header_timeout: f64,
    /// Seconds a client may take to send a request body (408 after).
    #[arg(long, default_value_t = 60.0)]
    pub body_timeout: f64,
    /// Seconds a response may wait for the client to read it before the connection is closed
    /// (a streaming client that stops reading frees its sequences then).
    #[arg(long, default_value_t = 60.0)]
    pub write_timeout: f64,
}

/// A positive, finite number of seconds given as `flag`.
fn seconds(value: f64, flag: &str) -> anyhow::Result<std::time::Duration> {
    if !(value.is_finite() && value > 0.0 && value < 1e9) {
        anyhow::bail!("--{flag} must be a positive number of seconds, got {value}");
    }
    Ok(std::time::Duration::from_secs_f64(value))
}

/// `max_position_embeddings` of a model folder's config (top level or `text_config`).
fn max_positions(dir: &std::path::Path) -> anyhow::Result<usize> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    v.get("max_position_embeddings")
        .or_else(|| v.pointer("/text_config/max_position_embeddings"))
        .and_then(serde_json::Value::as_u64)
        .map(|n| n as usize)
        .with_context(|| format!("{} has no max_position_embeddings; pass --max-model-len", path.display()))
}

pub fn serve(a: ServeArgs) -> anyhow::Result<ExitCode> {
    if a.max_concurrency == 0 {
        anyhow::bail!("--max-concurrency must be at least 1");
    }
    if a.max_connections == 0 {
        anyhow::bail!("--max-connections must be at least 1");
    }
    let connections = crate::serve::listener::ConnectionLimits {
        max_connections: a.max_connections,
        header_timeout: seconds(a.header_timeout, "header-timeout")?,
        body_timeout: seconds(a.body_timeout, "body-timeout")?,
        write_timeout: seconds(a.write_timeout, "write-timeout")?,
        ..Default::default()
    };
    let max_model_len = match a.max_model_len {
        Some(n) => n,
        None => max_positions(&a.model)?,
    };
    let name = match &a.served_model_name {
        Some(n) => n.clone(),
        None => a
            .model
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "default".into()),
    };
    let engine = open_serving_engine(&a.model, &a.device, a.max_concurrency, max_model_len, a.max_conversations)?;
    let config = ServeConfig {
        served_model_name: name.clone(),
        api_key: a.api_key.clone().or_else(|| std::env::var("EXECCRITIC_API_KEY").ok()).filter(|k| !k.is_empty()),
        max_sequences: a.max_concurrency + a.max_queue,
        limits: TokenLimits { max_model_len, max_tokens: a.max_tokens_limit },
        max_body_bytes: a.max_body_bytes,
        connections,
    };
    let state = AppState::new(engine, config);
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
            .await
            .with_context(|| format!("binding {}:{}", a.host, a.port))?;
        let addr = listener.local_addr()?;
        println!("serving {name} on http://{addr}/v1");
        eprintln!("[execcritic serve: model {name}, max concurrency {}, queue {}, context {max_model_len}{}]",
            a.max_concurrency, a.max_queue, if state.config.api_key.is_some() { ", API key required" } else { "" });
        crate::serve::serve(listener, state, shutdown_signal())
            .await
            .context("serving")
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
