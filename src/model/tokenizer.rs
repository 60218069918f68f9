//! Tokenizer (placeholder, filled below).
