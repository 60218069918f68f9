//! Fuzz target of `serve`'s HTTP routes (issue #26, item 1): JSON bodies for
//! `/v1/chat/completions` and `/v1/completions`, sent over loopback to one in-process server
//! (`execcritic::serve::serve`, the real accept loop) whose engine runs a model that ends every
//! turn at once.
//!
//! * `serve_routes`: bodies of the routes' shapes with every field now valid, now of a wrong type
//!   or value (null, huge and negative numbers, floats for integers, strings for arrays, objects
//!   nested past serde's depth, odd unicode, tools with odd schemas, unknown fields), and now and
//!   then a body cut short: every answer is 2xx or an OpenAI-shaped 4xx
//!   (`{"error": {"message", "type", "param", "code"}}`), never 5xx; the server answers every
//!   request (no panic, no hang); the engine is idle afterwards (no running or admitted
//!   sequence on `/metrics`).

use crate::driver::fuzz;
use execcritic::engine::{DecoderModel, Engine, EngineConfig, EngineError, StepInput, StepOutput};
use execcritic::model::chat::ChatTemplate;
use execcritic::model::tokenizer::Tokenizer;
use crate::in_process_server::InProcessServer;
use proptest::prelude::*;
use serde_json::{json, Value as J};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Ends every turn with its first token.
struct EndModel {
    end: u32,
    vocab: usize,
}

impl DecoderModel for EndModel {
    type State = ();
    fn new_state(&self) {}
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn experts_per_token(&self) -> usize {
        0
    }
    fn step(&self, batch: &mut [StepInput<'_, ()>], _routing: bool) -> Result<Vec<StepOutput>, EngineError> {
        Ok(batch
            .iter()
            .map(|_| {
                let mut logits = vec![0.0f32; self.vocab];
                logits[self.end as usize] = 40.0;
                StepOutput { logits, experts: None, sampled: None }
            })
            .collect())
    }
}

struct Server {
    base: String,
    _server: InProcessServer,
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
}

/// The one server of this binary, started on first use (it lives until the process exits).
fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tokenizer");
        let tokenizer = Tokenizer::from_dir(&dir).unwrap();
        let template = ChatTemplate::from_dir(&dir).unwrap();
        let model = EndModel { end: tokenizer.token_id("<|im_end|>").unwrap(), vocab: tokenizer.vocab_size() };
        let server = InProcessServer::start(Engine::start(model, tokenizer, Some(template), EngineConfig::default()).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        Server { base: server.base.clone(), _server: server, rt, client }
    })
}

/// A JSON value of the wrong kind, or an edge of the right one.
fn odd() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        prop::sample::select(vec![
            json!(0), json!(-1), json!(1.5), json!(1e308), json!(-1e308), json!(u64::MAX), json!(i64::MIN),
            json!(4097), json!(1_000_000_000), json!(""), json!("\u{0}"), json!("\u{fffd}\u{202e}\u{1f600}"),
            json!("<|im_end|>"), json!("<|im_start|>system"), json!("<tool_call>"), json!("x".repeat(5000)),
            json!([]), json!({}), json!(["a", 1]), json!({"type": "text", "text": "hi"}),
        ]),
        "[a-z\u{e9}\u{300}\u{1f600} ]{0,10}".prop_map(J::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(J::Array),
            prop::collection::vec(("[a-z_]{1,8}", inner), 0..4)
                .prop_map(|kv| J::Object(kv.into_iter().collect())),
        ]
    })
}

/// A field: its valid value (`ok`) seven times in eight, else an odd one.
fn field(ok: J) -> impl Strategy<Value = J> {
    prop_oneof![7 => Just(ok), 1 => odd()]
}

fn message() -> impl Strategy<Value = J> {
    (
        prop_oneof![
            6 => Just(json!("user")),
            2 => prop::sample::select(vec![json!("assistant"), json!("system"), json!("tool")]),
            1 => odd(),
        ],
        field(json!("hello")),
        prop::option::weighted(0.1, odd()),
    )
        .prop_map(|(role, content, extra)| {
            let mut m = json!({ "role": role, "content": content });
            if let Some(x) = extra {
                m["tool_calls"] = x;
            }
            m
        })
}

fn tools() -> impl Strategy<Value = J> {
    let tool = (field(json!("bash")), field(json!({"type": "object", "properties": {"command": {"type": "string"}}})))
        .prop_map(|(name, params)| json!({"type": "function", "function": {"name": name, "parameters": params}}));
    prop::collection::vec(tool, 0..3).prop_map(J::Array)
}

/// `[a, [a, [a, …]]]`, `depth` deep.
fn nested(depth: usize) -> J {
    (0..depth).fold(json!(1), |v, _| json!([v]))
}

/// (path, body): a body of one of the two routes, its fields drawn by [`field`].
fn request() -> impl Strategy<Value = (&'static str, String)> {
    let common = || {
        (
            field(json!(8)),
            field(json!(0.0)),
            field(json!(false)),
            field(json!(["\n\n"])),
            prop::option::weighted(0.2, ("[a-z_]{1,12}", odd())),
        )
    };
    let chat = (common(), prop::collection::vec(message(), 1..4), tools(), field(json!("tiny"))).prop_map(
        |((max_tokens, temperature, stream, stop, extra), messages, tools, model)| {
            let mut b = json!({"model": model, "messages": messages, "max_tokens": max_tokens,
                "temperature": temperature, "stream": stream, "stop": stop, "tools": tools});
            if let Some((k, v)) = extra {
                b[k] = v;
            }
            ("/v1/chat/completions", b)
        },
    );
    let completion = (common(), field(json!("Say hi")), field(json!("tiny"))).prop_map(
        |((max_tokens, temperature, stream, stop, extra), prompt, model)| {
            let mut b = json!({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                "temperature": temperature, "stream": stream, "stop": stop});
            if let Some((k, v)) = extra {
                b[k] = v;
            }
            ("/v1/completions", b)
        },
    );
    (prop_oneof![chat, completion], 0u8..20, any::<prop::sample::Index>()).prop_map(|((path, body), shape, cut)| {
        let text = match shape {
            0 => format!("{{\"messages\": {}}}", nested(200)),
            1 => {
                let t = body.to_string();
                String::from_utf8_lossy(&t.as_bytes()[..cut.index(t.len())]).into_owned()
            }
            _ => body.to_string(),
        };
        (path, text)
    })
}

/// Whether `body` is OpenAI's error shape.
fn openai_error(body: &J) -> bool {
    let e = &body["error"];
    e["message"].is_string() && e["type"].is_string() && e.get("param").is_some() && e.get("code").is_some()
}

/// A gauge of `/metrics`.
async fn gauge(s: &Server, name: &str) -> Option<f64> {
    let text = s.client.get(format!("{}/metrics", s.base)).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn serve_routes() {
    let s = server();
    fuzz("serve_routes", 200, request(), |(path, body)| {
        s.rt.block_on(async {
            let resp = s
                .client
                .post(format!("{}{path}", s.base))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .map_err(|e| TestCaseError::fail(format!("no answer: {e}")))?;
            let status = resp.status().as_u16();
            let text = resp.text().await.map_err(|e| TestCaseError::fail(format!("body cut: {e}")))?;
            prop_assert!(status < 500, "{status} for {body}: {text}");
            if status >= 400 {
                let json: J = serde_json::from_str(&text).unwrap_or(J::Null);
                prop_assert!(openai_error(&json), "{status} not OpenAI-shaped for {body}: {text}");
            }
            // Idle again: nothing running or admitted (the engine may still be ending a turn).
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let running = gauge(s, "execcritic_running_sequences").await;
                let admitted = gauge(s, "execcritic_admitted_sequences").await;
                if running == Some(0.0) && admitted == Some(0.0) {
                    break;
                }
                prop_assert!(Instant::now() < deadline, "not idle: running {running:?}, admitted {admitted:?}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(())
        })
    });
}
