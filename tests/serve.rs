//! `execcritic serve` end to end: the binary on the tiny fixture model (served as `tiny`) and an
//! in-process server over a scripted model that always answers with reasoning and one `bash` tool
//! call. Real clients nobody here wrote — the official `openai` Python package (the examples of
//! docs/serve.md, extracted and run), curl, mini-swe-agent — plus our own `http:` policy, bad
//! requests, back-pressure, client disconnects, and greedy output equal to `execcritic generate`.
//! Tests that need a Python package say so and skip when it is missing
//! (`scripts/ci-deps-serve.sh` installs them).

use execcritic::engine::{DecoderModel, Engine, EngineConfig, EngineError, StepInput, StepOutput};
use execcritic::model::chat::ChatTemplate;
use execcritic::model::tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[path = "common/tiny_model.rs"]
mod tiny_model;
#[path = "common/in_process_server.rs"]
mod in_process_server;
use in_process_server::InProcessServer;
use tiny_model::tiny_model_dir as model_dir;

/// `execcritic serve` on the tiny model, on a free loopback port.
struct BinServer {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl BinServer {
    fn start(extra: &[&str]) -> Self {
        let dir = model_dir();
        let mut child = Command::new(env!("CARGO_BIN_EXE_execcritic"))
            .args(["serve", "--model"])
            .arg(dir.path())
            .args(["--port", "0", "--served-model-name", "tiny"])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .trim_end_matches("/v1")
            .to_string();
        BinServer { child, base, _dir: dir }
    }
}

impl Drop for BinServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A model that ignores its input and always continues the assistant turn with `script` (then
/// `<|im_end|>`): the position in the script is the number of tokens after the prompt's last
/// `<think>\n`.
struct ScriptedModel {
    script: Vec<u32>,
    think: u32,
    newline: usize,
    end: u32,
    vocab: usize,
}

impl DecoderModel for ScriptedModel {
    type State = Vec<u32>;
    fn new_state(&self) -> Vec<u32> {
        Vec::new()
    }
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn experts_per_token(&self) -> usize {
        0
    }
    fn step(
        &self,
        batch: &mut [StepInput<'_, Vec<u32>>],
        _routing: bool,
    ) -> Result<Vec<StepOutput>, EngineError> {
        Ok(batch
            .iter_mut()
            .map(|s| {
                s.state.extend_from_slice(s.tokens);
                let start = s.state.iter().rposition(|&t| t == self.think).map_or(0, |p| p + 1 + self.newline);
                let k = s.state.len().saturating_sub(start);
                let next = self.script.get(k).copied().unwrap_or(self.end);
                let mut logits = vec![0.0f32; self.vocab];
                logits[next as usize] = 40.0; // certain even at temperature 1
                StepOutput {
                    logits,
                    experts: None,
                    sampled: None,
                }
            })
            .collect())
    }
}

const SCRIPT: &str = "The user wants the files listed.\n</think>\n\nLet me look.\n\n<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n</parameter>\n</function>\n</tool_call>";

/// An in-process server over the scripted model, served as `tiny`.
struct ScriptedServer;

impl ScriptedServer {
    fn start() -> InProcessServer {
        let tok_dir = root().join("models/tokenizer");
        let tokenizer = Tokenizer::from_dir(&tok_dir).unwrap();
        let template = ChatTemplate::from_dir(&tok_dir).unwrap();
        let model = ScriptedModel {
            script: tokenizer.encode(SCRIPT).unwrap(),
            think: tokenizer.token_id("<think>").unwrap(),
            newline: tokenizer.encode("\n").unwrap().len(),
            end: tokenizer.token_id("<|im_end|>").unwrap(),
            vocab: tokenizer.vocab_size(),
        };
        InProcessServer::start(Engine::start(model, tokenizer, Some(template), EngineConfig::default()).unwrap())
    }
}

fn python_has(module: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipping: python3 cannot import {module} (run scripts/ci-deps-serve.sh)");
    }
    ok
}

/// Run a command with a deadline; panic with its output unless it succeeds.
fn run_ok(cmd: &mut Command, deadline: Duration, what: &str) -> String {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (reader.join().unwrap(), err_reader.join().unwrap());
    match status {
        Some(s) if s.success() => stdout,
        Some(s) => panic!("{what} failed ({s}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}"),
        None => panic!("{what} ran past {deadline:?}:\n--- stdout\n{stdout}\n--- stderr\n{stderr}"),
    }
}

/// The `<!-- run: TAG -->` blocks of docs/serve.md: (language, code).
fn doc_blocks(tag: &str) -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(root().join("docs/serve.md")).unwrap();
    let marker = format!("<!-- run: {tag} -->");
    let mut out = Vec::new();
    let mut rest = doc.as_str();
    while let Some(i) = rest.find(&marker) {
        rest = &rest[i + marker.len()..];
        let fence = rest.find("```").unwrap();
        let lang_end = rest[fence..].find('\n').unwrap() + fence;
        let lang = rest[fence + 3..lang_end].trim().to_string();
        let body_end = rest[lang_end..].find("\n```").unwrap() + lang_end;
        out.push((lang, rest[lang_end + 1..body_end].to_string()));
        rest = &rest[body_end..];
    }
    assert!(!out.is_empty(), "no `run: {tag}` blocks in docs/serve.md");
    out
}

/// Run the doc blocks of `tag` against `base` (the docs say http://127.0.0.1:8000).
fn run_doc_blocks(tag: &str, base: &str) -> usize {
    let mut ran = 0;
    for (lang, code) in doc_blocks(tag) {
        let code = code.replace("http://127.0.0.1:8000", base);
        match lang.as_str() {
            "sh" => {
                run_ok(Command::new("bash").args(["-euo", "pipefail", "-c", &code]), Duration::from_secs(120), "curl example");
            }
            "python" if python_has("openai") => {
                run_ok(Command::new("python3").args(["-c", &code]), Duration::from_secs(180), "python example");
            }
            "python" => continue,
            other => panic!("unknown block language {other:?}"),
        }
        ran += 1;
    }
    ran
}

#[test]
fn doc_examples_run_against_the_tiny_model() {
    let server = BinServer::start(&[]);
    assert!(run_doc_blocks("tiny", &server.base) >= 1);
}

#[test]
fn doc_examples_get_tool_calls_from_the_scripted_model() {
    let server = ScriptedServer::start();
    run_doc_blocks("scripted", &server.base);
}

async fn post(client: &reqwest::Client, url: String, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let r = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|_| json!({ "raw": text })))
}

fn assert_openai_error(status: u16, body: &Value, want: u16, what: &str) {
    assert_eq!(status, want, "{what}: {body}");
    let e = &body["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {body}");
    assert!(e["type"].is_string() && e.get("param").is_some() && e["code"].is_string(), "{what}: {body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_openai_errors_and_the_server_keeps_serving() {
    let server = BinServer::start(&["--max-body-bytes", "4096", "--max-tokens-limit", "64", "--max-model-len", "256"]);
    let client = reqwest::Client::new();
    let chat = format!("{}/v1/chat/completions", server.base);
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases: Vec<(&str, String, String, u16)> = vec![
        ("malformed JSON", chat.clone(), "{\"model\": \"tiny\", \"messages\": [".into(), 400),
        ("not an object", chat.clone(), "[1, 2]".into(), 400),
        ("missing messages", chat.clone(), json!({"model": "tiny"}).to_string(), 400),
        ("unknown model", chat.clone(), json!({"model": "gpt-9", "messages": user}).to_string(), 404),
        ("bad role", chat.clone(), json!({"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}).to_string(), 400),
        ("system not first", chat.clone(), json!({"model": "tiny", "messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]}).to_string(), 400),
        ("negative max_tokens", chat.clone(), json!({"model": "tiny", "messages": user, "max_tokens": -1}).to_string(), 400),
        ("max_tokens over the limit", chat.clone(), json!({"model": "tiny", "messages": user, "max_tokens": 65}).to_string(), 400),
        ("context overflow", chat.clone(), json!({"model": "tiny", "messages": [{"role": "user", "content": "word ".repeat(300)}]}).to_string(), 400),
        ("oversized body", chat.clone(), json!({"model": "tiny", "messages": [{"role": "user", "content": "x".repeat(5000)}]}).to_string(), 413),
        ("invalid tool schema", chat.clone(), json!({"model": "tiny", "messages": user, "tools": [{"type": "function", "function": {"parameters": {}}}]}).to_string(), 400),
        ("tool_choice naming no tool", chat.clone(), json!({"model": "tiny", "messages": user, "tools": [{"type": "function", "function": {"name": "bash"}}], "tool_choice": {"type": "function", "function": {"name": "python"}}}).to_string(), 400),
        ("bad temperature", chat.clone(), json!({"model": "tiny", "messages": user, "temperature": -0.5}).to_string(), 400),
        ("n = 0", chat.clone(), json!({"model": "tiny", "messages": user, "n": 0}).to_string(), 400),
        ("top_logprobs without logprobs", chat.clone(), json!({"model": "tiny", "messages": user, "top_logprobs": 2}).to_string(), 400),
        ("token id outside the vocabulary", format!("{}/v1/completions", server.base), json!({"model": "tiny", "prompt": [1, 999999]}).to_string(), 400),
        ("empty prompt", format!("{}/v1/completions", server.base), json!({"model": "tiny", "prompt": []}).to_string(), 400),
        ("unknown endpoint", format!("{}/v1/embeddings", server.base), json!({"model": "tiny"}).to_string(), 404),
    ];
    for (what, url, body, want) in cases {
        let (status, v) = post(&client, url, body).await;
        assert_openai_error(status, &v, want, what);
    }
    let r = client.get(format!("{}/v1/models/gpt-9", server.base)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    // Still serving, and the failures were counted.
    let (status, v) = post(&client, chat, json!({"model": "tiny", "messages": user, "max_tokens": 4}).to_string()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    let metrics = client.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("execcritic_requests_total{endpoint=\"chat_completions\",status=\"400\"}"), "{metrics}");
    assert!(metrics.contains("execcritic_requests_total{endpoint=\"chat_completions\",status=\"200\"} 1"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread")]
async fn api_key_is_required_on_v1_only() {
    let server = BinServer::start(&["--api-key", "s3cret"]);
    let client = reqwest::Client::new();
    let models = format!("{}/v1/models", server.base);
    for auth in [None, Some("Bearer wrong"), Some("Bearer s3cre"), Some("s3cret")] {
        let mut req = client.get(&models);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        assert_openai_error(status, &r.json().await.unwrap(), 401, &format!("{auth:?}"));
    }
    let r = client.get(&models).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["data"][0]["id"], "tiny");
    assert_eq!(client.get(format!("{}/health", server.base)).send().await.unwrap().status().as_u16(), 200);
}

/// The value of a gauge in the /metrics text.
async fn gauge(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = client.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// Poll until the engine runs nothing and nothing is admitted (up to a generous deadline).
async fn wait_idle(client: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let running = gauge(client, base, "execcritic_running_sequences").await;
        let admitted = gauge(client, base, "execcritic_admitted_sequences").await;
        if running == 0.0 && admitted == 0.0 {
            return;
        }
        assert!(Instant::now() < deadline, "still running {running}, admitted {admitted}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A request body for a generation that would run for a long time.
fn long_request(stream: bool) -> String {
    json!({"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 30000, "ignore_eos": true, "stream": stream}).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn full_queue_is_429_and_a_disconnect_frees_the_sequence() {
    let server = BinServer::start(&["--max-concurrency", "1", "--max-queue", "0"]);
    let client = reqwest::Client::new();
    let url = format!("{}/v1/completions", server.base);
    // A streaming client reads a few chunks, then goes away.
    let mut stream = client.post(&url).header("content-type", "application/json").body(long_request(true)).send().await.unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    for _ in 0..3 {
        assert!(stream.chunk().await.unwrap().is_some());
    }
    assert_eq!(gauge(&client, &server.base, "execcritic_running_sequences").await, 1.0);
    let (status, v) = post(&client, url.clone(), json!({"model": "tiny", "prompt": "hi", "max_tokens": 2}).to_string()).await;
    assert_openai_error(status, &v, 429, "queue full");
    drop(stream);
    wait_idle(&client, &server.base).await;
    // A non-streaming client that closes its connection mid-generation frees it too.
    let addr = server.base.trim_start_matches("http://").to_string();
    let mut sock = std::net::TcpStream::connect(&addr).unwrap();
    let body = long_request(false);
    write!(sock, "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while gauge(&client, &server.base, "execcritic_running_sequences").await < 1.0 {
        assert!(Instant::now() < deadline, "the request never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(sock);
    wait_idle(&client, &server.base).await;
    // And the server serves again.
    let (status, v) = post(&client, url, json!({"model": "tiny", "prompt": "hi", "max_tokens": 2}).to_string()).await;
    assert_eq!(status, 200, "{v}");
}

/// Median and 99th percentile of `d`, in milliseconds.
fn p50_p99(d: &mut [Duration]) -> (f64, f64) {
    d.sort();
    let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99))
}

/// `n` well-formed chat requests one after another; each must succeed. Their latencies.
async fn well_formed_latencies(client: &reqwest::Client, base: &str, n: usize) -> Vec<Duration> {
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).to_string();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let (status, v) = post(client, format!("{base}/v1/chat/completions"), body.clone()).await;
        assert_eq!(status, 200, "a well-formed request under abuse: {v}");
        out.push(t.elapsed());
    }
    out
}

/// Read from `sock` until the server closes it or `within` passes; what it sent.
async fn read_until_closed(sock: &mut tokio::net::TcpStream, within: Duration) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, sock.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return Err(format!("still open after {within:?}; got {:?}", String::from_utf8_lossy(&got))),
        }
    }
}

/// Issue 26, "server under abuse": silent, slow (head, body, and a streaming response nobody
/// reads), disconnecting and malformed clients on loopback, bounded in count and time, while
/// well-formed requests keep being answered; afterwards every abusive connection was closed by
/// the server, no sequence is running or admitted, a flood beyond `--max-connections` was
/// refused and counted, and the server serves again. Latencies are printed (p50/p99 unloaded and
/// under abuse; benches/results/serve-abuse.md), never asserted.
#[tokio::test(flavor = "multi_thread")]
async fn slow_silent_and_malformed_clients_are_bounded_and_leave_nothing_behind() {
    use tokio::io::AsyncWriteExt;
    let server = BinServer::start(&["--max-connections", "64", "--header-timeout", "1", "--body-timeout", "1", "--write-timeout", "2"]);
    let client = reqwest::Client::new();
    let base = server.base.clone();
    let addr: std::net::SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let mut unloaded = well_formed_latencies(&client, &base, 30).await;

    let connect = move || async move { tokio::net::TcpStream::connect(addr).await.unwrap() };
    let head = |len: usize| format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n");
    let mut abusers = tokio::task::JoinSet::new();
    // Silent: connect and send nothing; closed after the header timeout.
    for _ in 0..8 {
        abusers.spawn(async move {
            let mut s = connect().await;
            read_until_closed(&mut s, Duration::from_secs(10)).await.map(|_| "silent")
        });
    }
    // Slowloris: a request head one byte every 200 ms, never finished.
    for _ in 0..8 {
        abusers.spawn(async move {
            let mut s = connect().await;
            for b in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
                if s.write_all(&[*b]).await.is_err() {
                    break; // closed by the server
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            read_until_closed(&mut s, Duration::from_secs(10)).await.map(|_| "slowloris")
        });
    }
    // Slow body: the head at once, then the body one byte every 200 ms; 408 after the body timeout.
    for _ in 0..8 {
        abusers.spawn(async move {
            let mut s = connect().await;
            s.write_all(head(100_000).as_bytes()).await.unwrap();
            for _ in 0..50 {
                if s.write_all(b" ").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let got = read_until_closed(&mut s, Duration::from_secs(10)).await?;
            let text = String::from_utf8_lossy(&got);
            if text.starts_with("HTTP/1.1 408") { Ok("slow body") } else { Err(format!("slow body answered {text:?}")) }
        });
    }
    // Malformed: each answered with a 4xx or closed, never left hanging.
    let malformed: Vec<Vec<u8>> = vec![
        b"\x00\x01\x02\xff garbage\r\n\r\n".to_vec(),
        b"GET / HTTP/9.9\r\n\r\n".to_vec(),
        format!("GET /health HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(1 << 20)).into_bytes(),
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n".to_vec(),
        b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n".to_vec(),
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello".to_vec(),
        format!("{}{{\"model\": \"tiny\", \"messages\": [", head(29)).into_bytes(),
        (0..200).map(|i| format!("X-H{i}: v\r\n")).fold(b"GET /health HTTP/1.1\r\n".to_vec(), |mut v, h| { v.extend(h.bytes()); v }),
    ];
    for bytes in malformed {
        abusers.spawn(async move {
            let mut s = connect().await;
            let _ = s.write_all(&bytes).await;
            let got = read_until_closed(&mut s, Duration::from_secs(10)).await?;
            let text = String::from_utf8_lossy(&got);
            if got.is_empty() || text.starts_with("HTTP/1.1 4") { Ok("malformed") } else { Err(format!("malformed answered {text:?}")) }
        });
    }
    // Streaming clients that go away after the first bytes.
    for _ in 0..4 {
        abusers.spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut s = connect().await;
            let body = long_request(true);
            s.write_all(format!("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes()).await.unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf).await;
            Ok("disconnected stream")
        });
    }
    // Streaming clients that never read (a small receive buffer): kept open until the end, so
    // only the server's write timeout can free their sequences.
    let mut readers_never = Vec::new();
    for _ in 0..4 {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        let body = long_request(true);
        s.write_all(format!("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes()).await.unwrap();
        readers_never.push(s);
    }

    let mut loaded = well_formed_latencies(&client, &base, 30).await;
    let mut outcomes = std::collections::BTreeMap::new();
    while let Some(r) = abusers.join_next().await {
        *outcomes.entry(r.unwrap().unwrap_or_else(|e| panic!("{e}"))).or_insert(0) += 1;
    }
    assert_eq!(outcomes.values().sum::<i32>(), 36, "{outcomes:?}");
    // The streams nobody reads are still open here: their sequences were ended by the server.
    wait_idle(&client, &base).await;
    assert_eq!(gauge(&client, &base, "execcritic_queue_depth").await, 0.0);
    drop(readers_never);

    // A flood beyond the connection limit: the excess is closed unread and counted; the silent
    // ones go after the header timeout, and the server serves again.
    let mut flood = Vec::new();
    for _ in 0..100 {
        flood.push(connect().await);
    }
    let mut closed_at_once = 0;
    for s in flood.iter_mut() {
        if read_until_closed(s, Duration::from_secs(5)).await.is_ok() {
            closed_at_once += 1;
        }
    }
    assert_eq!(closed_at_once, 100, "every flood connection is closed (refused, or after the header timeout)");
    drop(flood);
    let refused = gauge(&client, &base, "execcritic_connections_refused_total").await;
    assert!(refused >= 36.0, "100 connections on 64 slots (one is the client's): refused {refused}");
    well_formed_latencies(&client, &base, 3).await;

    let (u50, u99) = p50_p99(&mut unloaded);
    let (l50, l99) = p50_p99(&mut loaded);
    eprintln!(
        "serve abuse: well-formed chat (8 tokens) p50 {u50:.1} ms, p99 {u99:.1} ms unloaded; p50 {l50:.1} ms, p99 {l99:.1} ms under abuse (p99 ratio {:.2}); abusers {outcomes:?}; flood refused {refused}",
        l99 / u99
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_requests_share_decode_steps() {
    let server = BinServer::start(&[]);
    let client = reqwest::Client::new();
    let url = format!("{}/v1/completions", server.base);
    let requests: Vec<_> = (0..4)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { post(&client, url, long_request(false)).await }).abort_handle()
        })
        .collect();
    // All four are in one engine step at some point (a deadline, not a timing assertion).
    let deadline = Instant::now() + Duration::from_secs(30);
    while gauge(&client, &server.base, "execcritic_batch_size").await < 4.0 {
        assert!(Instant::now() < deadline, "the four requests never shared a step");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for r in requests {
        r.abort(); // the clients go away: their sequences are freed
    }
    wait_idle(&client, &server.base).await;
}

fn generate_cli(dir: &Path, extra: &[&str]) -> String {
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_execcritic"))
            .args(["generate", "--model"])
            .arg(dir)
            .args(["--prompt", "List the files.", "--max-tokens", "16"])
            .args(extra),
        Duration::from_secs(120),
        "execcritic generate",
    );
    out.strip_suffix('\n').unwrap_or(&out).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn greedy_server_output_equals_generate() {
    let server = BinServer::start(&[]);
    let client = reqwest::Client::new();
    // Chat-rendered, thinking off: the server's content is the completion (leading newlines
    // dropped, as the reasoning split does).
    let want = generate_cli(server._dir.path(), &["--no-thinking"]);
    let (status, v) = post(&client, format!("{}/v1/chat/completions", server.base), json!({
        "model": "tiny", "messages": [{"role": "user", "content": "List the files."}],
        "max_tokens": 16, "temperature": 0, "chat_template_kwargs": {"enable_thinking": false},
    }).to_string()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], want.trim_start_matches('\n'));
    // Raw prompt through /v1/completions.
    let want = generate_cli(server._dir.path(), &["--raw"]);
    let (status, v) = post(&client, format!("{}/v1/completions", server.base), json!({
        "model": "tiny", "prompt": "List the files.", "max_tokens": 16, "temperature": 0,
    }).to_string()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["text"], want);
}

#[tokio::test(flavor = "multi_thread")]
async fn our_http_policy_talks_to_our_server() {
    use execcritic::policy::{ChatMessage, ChatRequest, HttpPolicy, HttpPolicyConfig, Policy, SamplingParams};
    let tools = vec![json!({"type": "function", "function": {"name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}})];
    let request = |tools: Vec<Value>| ChatRequest {
        messages: vec![ChatMessage::system("You are terse."), ChatMessage::user("List the files.")],
        tools,
        sampling: SamplingParams { temperature: 0.0, max_tokens: 128, logprobs: true, ..Default::default() },
        conversation: None,
    };
    let scripted = ScriptedServer::start();
    let policy = HttpPolicy::new(HttpPolicyConfig::for_url(&format!("{}/v1", scripted.base), "tiny")).unwrap();
    let c = policy.complete(&[request(tools.clone())]).await.unwrap().remove(0);
    assert_eq!(c.tool_calls.len(), 1, "{c:?}");
    assert_eq!((c.tool_calls[0].name.as_str(), &c.tool_calls[0].arguments), ("bash", &json!({"command": "ls -la"})));
    assert_eq!(c.reasoning.as_deref(), Some("The user wants the files listed."));
    assert_eq!(c.text, "Let me look.");
    assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
    assert!(c.usage.prompt_tokens > 0 && c.usage.completion_tokens > 0);
    assert!(c.logprobs.as_ref().is_some_and(|l| !l.is_empty() && l.iter().all(|&x| x <= 0.0)));
    drop(scripted);
    // The tiny model: a batch of two requests, both answered.
    let server = BinServer::start(&[]);
    let policy = HttpPolicy::new(HttpPolicyConfig::for_url(&server.base, "tiny")).unwrap();
    let out = policy.complete(&[request(Vec::new()), request(tools)]).await.unwrap();
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|c| c.usage.completion_tokens > 0 && c.finish_reason.is_some()));
}

#[test]
fn mini_swe_agent_runs_steps_against_the_server() {
    if !python_has("minisweagent") {
        return;
    }
    let script = root().join("tests/serve/mini_swe_agent.py");
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("marker-file.txt"), "x").unwrap();
    let scripted = ScriptedServer::start();
    let out = run_ok(
        Command::new("python3").arg(&script).arg(format!("{}/v1", scripted.base)).args(["tiny"]).arg(work.path()).arg("tool_calls"),
        Duration::from_secs(240),
        "mini-swe-agent (scripted model)",
    );
    assert!(out.contains("mini-swe-agent OK"), "{out}");
    drop(scripted);
    let tiny = BinServer::start(&[]);
    let out = run_ok(
        Command::new("python3").arg(&script).arg(format!("{}/v1", tiny.base)).args(["tiny"]).arg(work.path()).arg("any"),
        Duration::from_secs(240),
        "mini-swe-agent (tiny model)",
    );
    assert!(out.contains("mini-swe-agent OK"), "{out}");
}
