//! Request limits and back-pressure: how many generations may be admitted at once (running plus
//! queued; beyond that a request gets 429 at once instead of waiting without bound), and the
//! token limits checked before a request reaches the engine (`max_tokens`, context length).

use super::error::ApiError;
use axum::http::StatusCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Admission control: at most `capacity` sequences (running + queued) at once.
#[derive(Debug)]
pub struct Admission {
    in_flight: AtomicUsize,
    capacity: usize,
}

/// Admitted sequences; released when dropped (request finished, failed or client gone).
#[derive(Debug)]
pub struct Permit {
    admission: Arc<Admission>,
    count: usize,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.admission
            .in_flight
            .fetch_sub(self.count, Ordering::AcqRel);
    }
}

impl Admission {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Admission {
            in_flight: AtomicUsize::new(0),
            capacity,
        })
    }

    /// Admit `count` sequences, or answer 429 when that would exceed the capacity.
    pub fn admit(self: &Arc<Self>, count: usize) -> Result<Permit, ApiError> {
        let admitted = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n + count <= self.capacity).then_some(n + count)
            });
        match admitted {
            Ok(_) => Ok(Permit {
                admission: self.clone(),
                count,
            }),
            Err(n) => Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "the server is at capacity ({n} of {} sequences in flight); retry later",
                    self.capacity
                ),
            )),
        }
    }

    /// Sequences admitted now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// Token limits of one server.
#[derive(Debug, Clone, Copy)]
pub struct TokenLimits {
    /// Prompt plus completion tokens of one sequence.
    pub max_model_len: usize,
    /// Largest `max_tokens` a request may ask for (also the default when it asks for none,
    /// capped by the context left).
    pub max_tokens: usize,
}

impl TokenLimits {
    /// The completion budget of a request with `prompt_len` prompt tokens that asked for
    /// `requested` (`None`: as many as fit).
    pub fn completion_budget(
        &self,
        prompt_len: usize,
        requested: Option<i64>,
        param: &str,
    ) -> Result<usize, ApiError> {
        let left = self.max_model_len.saturating_sub(prompt_len);
        if left == 0 {
            return Err(ApiError::invalid(
                "messages",
                format!(
                    "the prompt has {prompt_len} tokens; this model's context length is {} tokens",
                    self.max_model_len
                ),
            ));
        }
        let Some(n) = requested else {
            return Ok(left.min(self.max_tokens));
        };
        if n < 1 {
            return Err(ApiError::invalid(param, format!("{param} must be at least 1, got {n}")));
        }
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if n > self.max_tokens {
            return Err(ApiError::invalid(
                param,
                format!("{param} is {n}; this server allows at most {}", self.max_tokens),
            ));
        }
        if n > left {
            return Err(ApiError::invalid(
                param,
                format!(
                    "this model's context length is {} tokens; the prompt has {prompt_len} and {param} asks for {n}",
                    self.max_model_len
                ),
            ));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_refuses_beyond_capacity_and_frees_on_drop() {
        let a = Admission::new(3);
        let p = a.admit(2).unwrap();
        assert_eq!(a.admit(2).unwrap_err().status, StatusCode::TOO_MANY_REQUESTS);
        let q = a.admit(1).unwrap();
        assert_eq!(a.in_flight(), 3);
        drop(p);
        assert_eq!(a.in_flight(), 1);
        drop(q);
        assert_eq!(a.in_flight(), 0);
        assert!(a.admit(3).is_ok());
    }

    #[test]
    fn completion_budget_checks_limits() {
        let l = TokenLimits { max_model_len: 100, max_tokens: 50 };
        assert_eq!(l.completion_budget(10, None, "max_tokens").unwrap(), 50);
        assert_eq!(l.completion_budget(80, None, "max_tokens").unwrap(), 20);
        assert_eq!(l.completion_budget(10, Some(7), "max_tokens").unwrap(), 7);
        for bad in [Some(0), Some(-3), Some(51)] {
            let e = l.completion_budget(10, bad, "max_tokens").unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (StatusCode::BAD_REQUEST, Some("max_tokens")));
        }
        assert!(l.completion_budget(60, Some(45), "max_tokens").unwrap_err().message.contains("context length"));
        assert!(l.completion_budget(100, None, "max_tokens").is_err());
    }
}
