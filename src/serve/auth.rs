//! `--api-key`: every `/v1/*` request must carry `Authorization: Bearer KEY`; the key is compared
//! in constant time (no early exit on the first differing byte, so response timing does not leak
//! how much of a guess was right).

use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Whether `given` equals `expected`, in time independent of where they differ (lengths are
/// not secret: a key of the wrong length is rejected at once).
pub fn keys_match(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len() && bool::from(given.ct_eq(expected))
}

/// The bearer token of a request, if any.
fn bearer(req: &Request) -> Option<&[u8]> {
    let value = req.headers().get(header::AUTHORIZATION)?.as_bytes();
    let scheme = value.get(..7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| value[7..].trim_ascii())
}

/// Middleware: reject a request without the right key with 401.
pub async fn require_key(State(key): State<Arc<String>>, req: Request, next: Next) -> Response {
    match bearer(&req) {
        Some(given) if keys_match(given, key.as_bytes()) => next.run(req).await,
        _ => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid or missing API key (send Authorization: Bearer KEY)",
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::keys_match;

    #[test]
    fn keys_match_only_when_equal() {
        assert!(keys_match(b"secret", b"secret"));
        assert!(!keys_match(b"secreT", b"secret"));
        assert!(!keys_match(b"secret2", b"secret"));
        assert!(!keys_match(b"", b"secret"));
    }
}
