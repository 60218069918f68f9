//! Fuzz target of the tokenizer (`model::tokenizer`, the checkpoint's `tokenizer.json` through
//! the `tokenizers` crate) against the `tokenizers` Python package on the same file
//! (`models/tokenizer/tokenizer.json`).
//!
//! * `tokenizer_differential`: generated texts (ASCII words, accented, CJK, emoji with ZWJ and
//!   variation selectors, combining marks, right-to-left, whitespace runs of every kind, CRLF,
//!   digits, punctuation, special-token text and near-misses such as `<|im_`, long runs of one
//!   piece) and generated id sequences (ids of the text's encoding, random ids, ids past the
//!   vocabulary): `encode` gives the package's ids; `decode` (with and without
//!   `skip_special`) gives the package's text, or both refuse; the incremental decoder does not
//!   panic. Skipped, with a note, where `python3` cannot import `tokenizers`
//!   (`scripts/ci-deps-vocab.sh` installs it).

use crate::driver::fuzz;
use crate::oracle::{ask, Oracle};
use execcritic::model::tokenizer::{IncrementalDecoder, Tokenizer};
use proptest::prelude::*;
use serde_json::{json, Value as J};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

const PY: &str = r#"
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
def answer(q):
    if "text" in q:
        return tok.encode(q["text"], add_special_tokens=False).ids
    return tok.decode(q["ids"], skip_special_tokens=q["skip"])
serve(answer)
"#;

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tokenizer")
}

fn package() -> Option<&'static Mutex<Oracle>> {
    static ORACLE: OnceLock<Option<Mutex<Oracle>>> = OnceLock::new();
    ORACLE
        .get_or_init(|| {
            let file = dir().join("tokenizer.json");
            Oracle::start("tokenizer_differential", "tokenizers", PY, &[file.to_str()?])
        })
        .as_ref()
}

const PIECES: &[&str] = &[
    "hello", "world", " the", "fn main()", "caf\u{e9}", "cafe\u{301}", "\u{65e5}\u{672c}\u{8a9e}",
    "\u{1f468}\u{200d}\u{1f469}\u{200d}\u{1f467}", "\u{2764}\u{fe0f}", "\u{5d0}\u{5d1}\u{5d2}",
    "\u{627}\u{644}\u{639}", "\u{feff}", "\u{200b}", "\u{fffd}", "\u{10ffff}", "\u{0}", "\u{1b}[0m",
    " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n\n", "\u{a0}", "\u{3000}", "\u{2028}", "   \n  ",
    "0", "12345678901234567890", "3.14", "'s", "'LL", "!!", "...", "->", "{}", "\"", "\\",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "</tool_call>", "<tool_response>", "<|im_", "<|im_start|", "<think", "< think>", "<|IM_END|>",
    "<|im_start|><|im_end|>", "Ａ", "ﬁ", "\u{212b}",
];

/// A text of pieces, now and then one piece repeated many times.
pub fn text() -> impl Strategy<Value = String> {
    let piece = (prop::sample::select(PIECES), 0usize..40).prop_map(|(p, n)| {
        if n == 39 {
            p.repeat(200)
        } else {
            p.to_string()
        }
    });
    prop_oneof![
        4 => prop::collection::vec(piece, 0..16).prop_map(|v| v.concat()),
        1 => any::<String>(),
    ]
}

#[test]
fn tokenizer_differential() {
    let Some(py) = package() else { return };
    let ours = Tokenizer::from_dir(&dir()).expect("models/tokenizer loads");
    let vocab = ours.vocab_size() as u32;
    let extra = prop::collection::vec(0..vocab + 8, 0..12);
    fuzz("tokenizer_differential", 300, (text(), extra, any::<bool>()), |(text, extra, skip)| {
        let ids = ours.encode(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let theirs = ask(py, &json!({ "text": text }))?;
        prop_assert_eq!(json!(["ok", ids]), theirs, "encode differs");
        for ids in [ids.clone(), extra, [ids, vec![vocab, u32::MAX]].concat()] {
            let decoded = ours.decode(&ids, skip);
            let theirs = ask(py, &json!({ "ids": ids, "skip": skip }))?;
            match (&decoded, theirs[0].as_str()) {
                (Ok(d), Some("ok")) => prop_assert_eq!(&J::String(d.clone()), &theirs[1], "decode differs"),
                (Err(_), Some("err")) => {}
                _ => prop_assert!(false, "decode of {ids:?}: ours {decoded:?}, the package {theirs}"),
            }
            let mut inc = IncrementalDecoder::new(skip);
            for &id in &ids {
                let _ = inc.push(&ours, id);
            }
            let _ = inc.flush(&ours);
        }
        Ok(())
    });
}
