//! The checkpoint's tokenizer: `tokenizer.json` through the `tokenizers` crate, special tokens
//! found by their text, the stop ids the checkpoint declares, and incremental detokenisation.
//!
//! Stop ids are the union of `eos_token_id` in `generation_config.json` (an id or a list),
//! `eos_token_id` in `config.json` (top level or `text_config`), and the id of `eos_token` in
//! `tokenizer_config.json`. Qwen3.5 declares `<|im_end|>` and `<|endoftext|>`. Encoding never adds
//! a BOS (`add_bos_token=false` for Qwen); special-token text inside the input (`<|im_start|>`, …)
//! is matched as that token, as the chat template's output requires.

use crate::model::chat::token_string;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("loading {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("parsing {path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("token `{0}` is not in the vocabulary")]
    UnknownToken(String),
    #[error("encoding failed: {0}")]
    Encode(String),
    #[error("decoding failed: {0}")]
    Decode(String),
}

/// A loaded tokenizer with the checkpoint's stop ids.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    stop_ids: Vec<u32>,
    eos_token: Option<String>,
}

impl Tokenizer {
    /// Load `tokenizer.json` (required) and the stop ids from the configs next to it.
    pub fn from_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(TokenizerError::Load {
                path,
                message: "file not found".into(),
            });
        }
        let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| TokenizerError::Load {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let mut tok = Tokenizer {
            inner,
            stop_ids: Vec::new(),
            eos_token: None,
        };
        let tokenizer_config = read_json(&dir.join("tokenizer_config.json"))?;
        tok.eos_token = tokenizer_config
            .as_ref()
            .and_then(|c| token_string(c.get("eos_token")?));
        let mut stops = Vec::new();
        if let Some(gen) = read_json(&dir.join("generation_config.json"))? {
            stops.extend(ids_of(gen.get("eos_token_id")));
        }
        if let Some(cfg) = read_json(&dir.join("config.json"))? {
            stops.extend(ids_of(cfg.get("eos_token_id")));
            stops.extend(ids_of(
                cfg.get("text_config").and_then(|t| t.get("eos_token_id")),
            ));
        }
        if let Some(eos) = &tok.eos_token {
            stops.push(tok.token_id(eos)?);
        }
        stops.sort_unstable();
        stops.dedup();
        tok.stop_ids = stops;
        Ok(tok)
    }

    /// Number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token given by its text (e.g. `<|im_end|>`, `<think>`).
    pub fn token_id(&self, token: &str) -> Result<u32, TokenizerError> {
        self.inner
            .token_to_id(token)
            .ok_or_else(|| TokenizerError::UnknownToken(token.to_string()))
    }

    /// The text of one id, if it exists.
    pub fn id_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Ids that end a generation (see the module docs).
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// `eos_token` of tokenizer_config.json.
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// Encode text (no BOS; special-token text becomes the special token).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decode ids; `skip_special` drops tokens flagged special (`<|im_end|>`, …, but not `<think>`
    /// or `<tool_call>`, which Qwen marks as ordinary added tokens).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }
}

fn read_json(path: &Path) -> Result<Option<Value>, TokenizerError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| TokenizerError::Json {
                path: path.to_path_buf(),
                source,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TokenizerError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn ids_of(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|i| i as u32).into_iter().collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_u64)
            .map(|i| i as u32)
            .collect(),
        _ => Vec::new(),
    }
}

/// Turns a growing list of ids into text pieces without splitting multi-byte characters: a piece
/// is released only once the decoded text no longer ends in an incomplete UTF-8 sequence
/// (U+FFFD), and earlier text is never re-emitted (the prefix/read offset scheme of TGI/vLLM).
#[derive(Debug, Clone, Default)]
pub struct IncrementalDecoder {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    skip_special: bool,
}

impl IncrementalDecoder {
    pub fn new(skip_special: bool) -> Self {
        IncrementalDecoder {
            skip_special,
            ..Default::default()
        }
    }

    /// Add one id; returns the newly completed text (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String, TokenizerError> {
        self.ids.push(id);
        let prefix = tok.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special,
        )?;
        let full = tok.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        if full.len() > prefix.len()
            && !full.ends_with('\u{FFFD}')
            && full.is_char_boundary(prefix.len())
        {
            let piece = full[prefix.len()..].to_string();
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            Ok(piece)
        } else {
            Ok(String::new())
        }
    }

    /// Text still held back (an incomplete character at the end), decoded lossily.
    pub fn flush(&mut self, tok: &Tokenizer) -> Result<String, TokenizerError> {
        let prefix = tok.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special,
        )?;
        let full = tok.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        Ok(full.get(prefix.len()..).unwrap_or_default().to_string())
    }
}
