//! The tiny Qwen3.5-style tokenizer fixture loaded through `model::tokenizer`; expected ids were
//! produced by the Python `tokenizers` 0.22.1 library from the same tokenizer.json.

use execcritic::model::tokenizer::{IncrementalDecoder, Tokenizer, TokenizerError};
use std::path::Path;

fn dir() -> &'static Path {
    Box::leak(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("models/tokenizer")
            .into_boxed_path(),
    )
}

#[test]
fn encodes_like_python_tokenizers() {
    let tok = Tokenizer::from_dir(dir()).unwrap();
    assert_eq!(tok.vocab_size(), 1024);
    let cases: [(&str, &[u32]); 3] = [
        (
            "<|im_start|>user\nList the files in src/, then run `pytest -q`.<|im_end|>\n<|im_start|>assistant\n<think>\n",
            &[999, 84, 406, 198, 43, 482, 294, 654, 82, 302, 306, 81, 66, 14, 11, 294, 77, 404, 334, 862, 79, 88, 754, 500, 80, 63, 13, 1000, 198, 999, 377, 482, 64, 317, 198, 1022, 198],
        ),
        (
            "def f(x):\n    return x  # ü café 12345 naïve",
            &[454, 283, 7, 87, 318, 259, 341, 220, 87, 220, 292, 220, 127, 120, 281, 64, 69, 127, 102, 220, 16, 17, 18, 19, 20, 293, 64, 127, 107, 353],
        ),
        // NFC: "e" + combining acute becomes "é".
        ("e\u{301}t\u{e9} \u{4e2d}\u{6587} <tool_call>\n<function=bash>", &[127, 102, 83, 127, 102, 220, 160, 116, 255, 162, 244, 229, 220, 1012, 198, 27, 69, 612, 28, 65, 767, 29]),
    ];
    for (text, ids) in cases {
        assert_eq!(tok.encode(text).unwrap(), ids, "{text:?}");
    }
    let ids = tok.encode(cases[0].0).unwrap();
    assert_eq!(
        tok.decode(&ids, true).unwrap(),
        "user\nList the files in src/, then run `pytest -q`.\nassistant\n<think>\n"
    );
    assert_eq!(tok.decode(&ids, false).unwrap(), cases[0].0);
}

#[test]
fn special_tokens_and_stop_ids() {
    let tok = Tokenizer::from_dir(dir()).unwrap();
    let names = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
        "<think>",
        "</think>",
    ];
    let ids: Vec<u32> = names.iter().map(|n| tok.token_id(n).unwrap()).collect();
    assert_eq!(ids, [998, 999, 1000, 1012, 1013, 1020, 1021, 1022, 1023]);
    assert_eq!(tok.id_token(1000).as_deref(), Some("<|im_end|>"));
    // Only tokenizer_config's eos_token here.
    assert_eq!(tok.stop_ids(), &[1000]);
    assert!(matches!(
        tok.token_id("<nope>"),
        Err(TokenizerError::UnknownToken(_))
    ));

    // A model folder adds its generation_config / config eos ids.
    let model = tempfile::tempdir().unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(dir().join(f), model.path().join(f)).unwrap();
    }
    std::fs::write(
        model.path().join("generation_config.json"),
        r#"{"eos_token_id": [1000, 998]}"#,
    )
    .unwrap();
    std::fs::write(
        model.path().join("config.json"),
        r#"{"text_config": {"eos_token_id": 1017}}"#,
    )
    .unwrap();
    assert_eq!(
        Tokenizer::from_dir(model.path()).unwrap().stop_ids(),
        &[998, 1000, 1017]
    );
}

#[test]
fn bad_tokenizer_files_are_errors() {
    let d = tempfile::tempdir().unwrap();
    assert!(matches!(
        Tokenizer::from_dir(d.path()),
        Err(TokenizerError::Load { .. })
    ));
    std::fs::write(d.path().join("tokenizer.json"), "{ not json").unwrap();
    assert!(matches!(
        Tokenizer::from_dir(d.path()),
        Err(TokenizerError::Load { .. })
    ));
    std::fs::copy(
        dir().join("tokenizer.json"),
        d.path().join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(d.path().join("generation_config.json"), "[").unwrap();
    assert!(matches!(
        Tokenizer::from_dir(d.path()),
        Err(TokenizerError::Json { .. })
    ));
}

#[test]
fn incremental_decoding_never_splits_characters() {
    let tok = Tokenizer::from_dir(dir()).unwrap();
    let text = "naïve 中文 café <think>ok</think> ü";
    let ids = tok.encode(text).unwrap();
    let mut dec = IncrementalDecoder::new(false);
    let mut pieces = Vec::new();
    for &id in &ids {
        let piece = dec.push(&tok, id).unwrap();
        assert!(!piece.contains('\u{FFFD}'), "{piece:?}");
        pieces.push(piece);
    }
    pieces.push(dec.flush(&tok).unwrap());
    assert_eq!(pieces.concat(), text);
    // 中 is three byte tokens: the first two yield nothing.
    assert!(pieces.iter().filter(|p| p.is_empty()).count() >= 2);
}
