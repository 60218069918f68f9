//! `ApiError`: a failed request in OpenAI's error shape,
//! `{"error": {"message", "type", "param", "code"}}`, with the HTTP status that goes with it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            param: None,
        }
    }

    /// 400 for a bad value of `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param.to_string()),
            ..Self::new(StatusCode::BAD_REQUEST, message)
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// OpenAI's `type` for this status.
    pub fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        }
    }

    /// OpenAI's `code` for this status.
    fn code(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "invalid_api_key",
            404 => "model_not_found",
            413 => "request_too_large",
            429 => "rate_limit_exceeded",
            400..=499 => "invalid_request",
            _ => "internal_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({ "error": {
            "message": self.message,
            "type": self.kind(),
            "param": self.param,
            "code": self.code(),
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

impl From<crate::engine::EngineError> for ApiError {
    fn from(e: crate::engine::EngineError) -> Self {
        use crate::engine::EngineError as E;
        match e {
            // CacheFull: the request does not fit the model's cache even alone (too long)
            E::BadRequest(_) | E::Chat(_) | E::Tokenizer(_) | E::CacheFull(_) => {
                Self::bad_request(e.to_string())
            }
            E::Shutdown | E::Cancelled => Self::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            E::Model(_) | E::Load(_) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
}

impl From<crate::model::tokenizer::TokenizerError> for ApiError {
    fn from(e: crate::model::tokenizer::TokenizerError) -> Self {
        Self::bad_request(format!("tokenizer: {e}"))
    }
}
