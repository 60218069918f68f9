//! The HTTP policy against a real OpenAI-compatible HTTP server on 127.0.0.1 started by the test:
//! request shape, response parsing (content, reasoning, tool calls, usage, logprobs), retries on
//! 5xx, client errors, and an unreachable server reported as an infrastructure error.

use execcritic::policy::*;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// A tiny HTTP/1.1 server: answers each request with the next scripted (status, body) and records
/// the request bodies it received.
async fn serve(responses: Vec<(u16, Value)>) -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        let mut responses = responses.into_iter();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (status, body) = responses
                .next()
                .unwrap_or((500, json!({"error": "script over"})));
            let mut reader = BufReader::new(stream);
            let mut len = 0usize;
            let mut path = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                    break;
                }
                if path.is_empty() {
                    path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut buf = vec![0u8; len];
            reader.read_exact(&mut buf).await.unwrap();
            let mut req: Value = serde_json::from_slice(&buf).unwrap();
            req["_path"] = json!(path);
            seen2.lock().unwrap().push(req);
            let text = body.to_string();
            let resp = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            let mut stream = reader.into_inner();
            let _ = stream.write_all(resp.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    });
    (format!("http://{addr}"), seen)
}

fn request(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::system("sys"), ChatMessage::user(text)],
        tools: execcritic::agent::tool::bash_tools(),
        sampling: SamplingParams {
            temperature: 0.6,
            logprobs: true,
            ..SamplingParams::default()
        },
        conversation: None,
    }
}

fn fast(url: &str) -> HttpPolicy {
    let mut c = HttpPolicyConfig::for_url(url, "qwen-test");
    c.initial_backoff = Duration::from_millis(10);
    c.attempts = 3;
    HttpPolicy::new(c).unwrap()
}

#[tokio::test]
async fn completion_roundtrip_with_tool_calls_and_retry() {
    let ok = json!({
        "choices": [{
            "message": {
                "role": "assistant",
                "content": "let me look",
                "reasoning_content": "thinking",
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]
            },
            "finish_reason": "tool_calls",
            "logprobs": {"content": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.25}]}
        }],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7}
    });
    let (url, seen) = serve(vec![(503, json!({"error": "warming up"})), (200, ok)]).await;
    let policy = fast(&url);
    let out = complete_one(&policy, request("hello")).await.unwrap();
    assert_eq!(out.text, "let me look");
    assert_eq!(out.reasoning.as_deref(), Some("thinking"));
    assert_eq!(out.tool_calls.len(), 1);
    assert_eq!(out.tool_calls[0].arguments, json!({"command": "ls"}));
    assert_eq!(
        out.usage,
        Usage {
            prompt_tokens: 11,
            completion_tokens: 7
        }
    );
    assert_eq!(out.logprobs, Some(vec![-0.5, -1.25]));
    assert_eq!(out.finish_reason.as_deref(), Some("tool_calls"));

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "one retry after the 503");
    let body = &seen[1];
    assert_eq!(body["_path"], "/v1/chat/completions");
    assert_eq!(body["model"], "qwen-test");
    assert_eq!(body["messages"][1]["content"], "hello");
    assert_eq!(body["tools"][0]["function"]["name"], "bash");
    assert!((body["temperature"].as_f64().unwrap() - 0.6).abs() < 1e-6);
    assert_eq!(body["logprobs"], true);
}

#[tokio::test]
async fn batch_is_answered_in_order() {
    let mk = |t: &str| (200, json!({"choices": [{"message": {"content": t}}]}));
    let (url, _) = serve(vec![mk("one"), mk("two")]).await;
    let policy = fast(&url);
    // Sent concurrently; the server answers in arrival order, so check the set and the count.
    let out = policy
        .complete(&[request("a"), request("b")])
        .await
        .unwrap();
    let mut texts: Vec<_> = out.iter().map(|c| c.text.clone()).collect();
    texts.sort();
    assert_eq!(texts, vec!["one", "two"]);
}

#[tokio::test]
async fn client_error_is_not_retried() {
    let (url, seen) = serve(vec![(400, json!({"error": "bad model"}))]).await;
    let err = complete_one(&fast(&url), request("x")).await.unwrap_err();
    assert!(
        matches!(err, PolicyError::Http { status: 400, .. }),
        "{err}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn garbage_response_is_a_typed_error() {
    let (url, _) = serve(vec![(200, json!({"nothing": true}))]).await;
    let err = complete_one(&fast(&url), request("x")).await.unwrap_err();
    assert!(matches!(err, PolicyError::BadResponse { .. }), "{err}");
}

#[tokio::test]
async fn unreachable_server_is_infra_error() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = complete_one(&fast(&format!("http://127.0.0.1:{port}")), request("x"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, PolicyError::Unreachable { attempts: 3, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn scripted_policy_replays_and_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.jsonl");
    std::fs::write(
        &p,
        "{\"content\": \"a\"}\n\n{\"content\": \"b\", \"reasoning_content\": \"r\"}\n",
    )
    .unwrap();
    let spec: PolicySpec = format!("scripted:{}", p.display()).parse().unwrap();
    let policy = open_policy(&spec).unwrap();
    assert_eq!(
        complete_one(policy.as_ref(), request("1"))
            .await
            .unwrap()
            .text,
        "a"
    );
    let b = complete_one(policy.as_ref(), request("2")).await.unwrap();
    assert_eq!((b.text.as_str(), b.reasoning.as_deref()), ("b", Some("r")));
    let err = complete_one(policy.as_ref(), request("3"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, PolicyError::ScriptExhausted { served: 2, .. }),
        "{err}"
    );

    std::fs::write(&p, "{\"text\": \"wrong key\"}\n").unwrap();
    assert!(matches!(
        ScriptedPolicy::from_file(&p),
        Err(PolicyError::Script { .. })
    ));
    assert!(open_policy(&"engine:/nonexistent".parse().unwrap()).is_err());
}
