//! The checkpoint's tokenizer: `tokenizer.json` through the `tokenizers` crate, special tokens
//! found by their text, the stop ids the checkpoint declares, and incremental detokenisation.
//!
//! Stop ids are the union of `eos_token_id` in `generation_config.json` (an id or a list),
//! `eos_token_id` in `config.json` (top level or `text_config`), and the id of `eos_token` in
//! `tokenizer_config.json`. Qwen3.5 declares `<|im_end|>` and `<|endoftext|>`. Encoding never adds
//! a BOS (`add_bos_token=false` for Qwen); special-token text inside the input (`<|im_start|>`, …)
//! is matched as that token, as the chat template's output requires.
//!
//! **Consistency.** A `tokenizer.json` whose added tokens would not get their declared ids, or
//! whose unknown token is not in its vocabulary, is refused ([`TokenizerError::Inconsistent`]).
//!
//! **Bounds.** A panic inside the `tokenizers` crate while loading, encoding or decoding is an
//! error ([`TokenizerError::Load`], `Encode`, `Decode`). The files are read with the caps of [`crate::model::files`]; an id in
//! `eos_token_id` that is not an integer in `u32` is an error ([`TokenizerError::Config`]), not a
//! value wrapped or skipped.

use crate::panics;
use crate::model::chat::token_string;
use crate::model::files::{read_text, MAX_CONFIG_BYTES, MAX_TOKENIZER_JSON_BYTES};
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
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    /// `tokenizer.json` parses, but the tokenizer built from it would not give the ids the file
    /// declares.
    #[error("{path}: {message}")]
    Inconsistent { path: PathBuf, message: String },
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
    /// Ids of added tokens (`<|im_start|>`, `<think>`, …), sorted.
    added_ids: Vec<u32>,
}

impl Tokenizer {
    /// Load `tokenizer.json` (required) and the stop ids from the configs next to it.
    pub fn from_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let path = dir.join("tokenizer.json");
        let load = |message: String| TokenizerError::Load {
            path: path.clone(),
            message,
        };
        let text = read_text(&path, MAX_TOKENIZER_JSON_BYTES)
            .map_err(|e| load(e.to_string()))?
            .ok_or_else(|| load("file not found".into()))?;
        let inner = panics::caught("the tokenizers crate", || tokenizers::Tokenizer::from_bytes(text.as_bytes()))
            .map_err(load)?
            .map_err(|e| load(e.to_string()))?;
        check_ids(&inner, &text).map_err(|message| TokenizerError::Inconsistent {
            path: path.clone(),
            message,
        })?;
        let mut added_ids: Vec<u32> = inner.get_added_tokens_decoder().keys().copied().collect();
        added_ids.sort_unstable();
        let mut tok = Tokenizer {
            inner,
            stop_ids: Vec::new(),
            eos_token: None,
            added_ids,
        };
        let tokenizer_config = read_json(&dir.join("tokenizer_config.json"))?;
        tok.eos_token = tokenizer_config
            .as_ref()
            .and_then(|c| token_string(c.get("eos_token")?));
        let mut stops = Vec::new();
        let gen_path = dir.join("generation_config.json");
        if let Some(gen) = read_json(&gen_path)? {
            stops.extend(ids_of(&gen_path, gen.get("eos_token_id"))?);
        }
        let cfg_path = dir.join("config.json");
        if let Some(cfg) = read_json(&cfg_path)? {
            stops.extend(ids_of(&cfg_path, cfg.get("eos_token_id"))?);
            stops.extend(ids_of(
                &cfg_path,
                cfg.get("text_config").and_then(|t| t.get("eos_token_id")),
            )?);
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

    /// True for added tokens (`<|im_start|>`, `<think>`, `<tool_call>`, …): text is split at them
    /// before BPE, so a token sequence can always be cut right after one and re-tokenised text
    /// after it starts afresh.
    pub fn is_added_token(&self, id: u32) -> bool {
        self.added_ids.binary_search(&id).is_ok()
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
        let enc = panics::caught("the tokenizers crate", || self.inner.encode(text, false))
            .map_err(TokenizerError::Encode)?
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decode ids; `skip_special` drops tokens flagged special (`<|im_end|>`, …, but not `<think>`
    /// or `<tool_call>`, which Qwen marks as ordinary added tokens).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        // Not handed to the crate: 0.23's `BPEDecoder` subtracts one from the token count.
        if ids.is_empty() {
            return Ok(String::new());
        }
        panics::caught("the tokenizers crate", || self.inner.decode(ids, skip_special))
            .map_err(TokenizerError::Decode)?
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }
}

/// The ids a loaded tokenizer gives must be the ones `tokenizer.json` declares. The `tokenizers`
/// crate (like the Python package) moves an added token whose `id` leaves a gap after the
/// vocabulary to the next free id, in an order that differs between runs, and maps text to an
/// unknown token missing from the vocabulary to whatever id it finds; the model would then see
/// other tokens than the ones it was trained on. Found by the `tokenizer_load` fuzz target: both
/// sides of the differential gave a different id on every run.
fn check_ids(inner: &tokenizers::Tokenizer, text: &str) -> Result<(), String> {
    let file: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    for t in file.get("added_tokens").and_then(Value::as_array).into_iter().flatten() {
        let (Some(content), Some(id)) = (t.get("content").and_then(Value::as_str), t.get("id").and_then(Value::as_u64)) else {
            continue;
        };
        let given = inner.token_to_id(content);
        if given.map(u64::from) != Some(id) {
            return Err(format!("added token {content:?} is declared as id {id}, the tokenizer gives it {given:?}"));
        }
    }
    if let Some(unk) = file.pointer("/model/unk_token").and_then(Value::as_str) {
        if tokenizers::Model::token_to_id(inner.get_model(), unk).is_none() {
            return Err(format!("the unknown token {unk:?} is not in the vocabulary"));
        }
    }
    Ok(())
}


fn read_json(path: &Path) -> Result<Option<Value>, TokenizerError> {
    let text = read_text(path, MAX_CONFIG_BYTES).map_err(|source| TokenizerError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    text.map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|source| TokenizerError::Json {
            path: path.to_path_buf(),
            source,
        })
}

/// `eos_token_id`: absent or null (no ids), an id, or a list of ids; an id is an integer in `u32`.
fn ids_of(path: &Path, v: Option<&Value>) -> Result<Vec<u32>, TokenizerError> {
    let id = |v: &Value| {
        v.as_u64().and_then(|i| u32::try_from(i).ok()).ok_or_else(|| TokenizerError::Config {
            path: path.to_path_buf(),
            message: format!("eos_token_id {v} is not a token id"),
        })
    };
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(id).collect(),
        Some(v) => Ok(vec![id(v)?]),
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
