//! Server-Sent Events: a response body fed from a channel of JSON payloads, each sent as
//! `data: {json}\n\n`, closed by `data: [DONE]\n\n` once the producer is done. When the client
//! goes away the body (and with it the channel's receiver) is dropped, so the producer's next
//! send fails and it stops — which cancels its engine sequences.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use futures_util::stream;
use serde_json::Value;
use tokio::sync::mpsc;

/// Events buffered between the producer and a slow client.
pub const BUFFER: usize = 256;

/// A streaming response over `rx`.
pub fn response(rx: mpsc::Receiver<Value>) -> Response {
    let events = stream::unfold(Some(rx), |rx| async move {
        let mut rx = rx?;
        match rx.recv().await {
            Some(v) => Some((Ok::<Bytes, std::convert::Infallible>(Bytes::from(format!("data: {v}\n\n"))), Some(rx))),
            None => Some((Ok(Bytes::from_static(b"data: [DONE]\n\n")), None)),
        }
    });
    let mut r = Response::new(Body::from_stream(events));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
