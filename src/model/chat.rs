//! Chat rendering (placeholder, filled below).
