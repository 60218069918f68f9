//! `PolicySpec`: the command-line form of a policy — `scripted:FILE`, `http:URL[#MODEL]` or
//! `engine:MODEL_DIR[@DEVICE[:DTYPE]]` (the embedded engine on `cpu`, the default, `cuda`,
//! `cuda:N` or `emulator`, optionally in `bf16` or `f32`; see [`crate::engine::placement`]; a
//! folder whose name contains `@` is written with an explicit `@cpu`) — and `open_policy`,
//! which builds it.

use super::{EnginePolicy, HttpPolicy, HttpPolicyConfig, Policy, PolicyError, ScriptedPolicy};
use crate::engine::Placement;
use std::path::PathBuf;
use std::str::FromStr;

/// Which policy to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySpec {
    Scripted(PathBuf),
    /// Base URL (or full endpoint) and the model name sent to the server (default `default`).
    Http {
        url: String,
        model: String,
    },
    Engine { dir: PathBuf, placement: Placement },
}

impl FromStr for PolicySpec {
    type Err = PolicyError;

    fn from_str(spec: &str) -> Result<Self, PolicyError> {
        let bad = |reason: &str| PolicyError::BadSpec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let (kind, rest) = spec
            .split_once(':')
            .ok_or_else(|| {
                bad("expected scripted:FILE, http:URL[#MODEL] or engine:MODEL_DIR[@DEVICE]")
            })?;
        if rest.trim().is_empty() {
            return Err(bad("nothing after the colon"));
        }
        match kind {
            "scripted" => Ok(PolicySpec::Scripted(PathBuf::from(rest))),
            "engine" => {
                let (dir, placement) = match rest.rsplit_once('@') {
                    Some((dir, device)) => (dir, device.parse().map_err(|e: String| bad(&e))?),
                    None => (rest, Placement::default()),
                };
                if dir.trim().is_empty() {
                    return Err(bad("no model folder before the @"));
                }
                Ok(PolicySpec::Engine {
                    dir: PathBuf::from(dir),
                    placement,
                })
            }
            "http" => {
                let (url, model) = match rest.rsplit_once('#') {
                    Some((u, m)) if !m.is_empty() => (u, m),
                    Some((u, _)) => (u, "default"),
                    None => (rest, "default"),
                };
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(bad("the URL must start with http:// or https://"));
                }
                Ok(PolicySpec::Http {
                    url: url.to_string(),
                    model: model.to_string(),
                })
            }
            other => Err(bad(&format!("unknown policy kind {other:?}"))),
        }
    }
}

/// Build the policy a spec names. The HTTP policy takes a bearer token from `OPENAI_API_KEY`
/// when that variable is set.
pub fn open_policy(spec: &PolicySpec) -> Result<Box<dyn Policy>, PolicyError> {
    match spec {
        PolicySpec::Scripted(path) => Ok(Box::new(ScriptedPolicy::from_file(path)?)),
        PolicySpec::Http { url, model } => {
            let mut config = HttpPolicyConfig::for_url(url, model);
            config.api_key = std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|k| !k.is_empty());
            Ok(Box::new(HttpPolicy::new(config)?))
        }
        PolicySpec::Engine { dir, placement } => {
            Ok(Box::new(EnginePolicy::open_on(dir, *placement)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(
            "scripted:a/b.jsonl".parse::<PolicySpec>().unwrap(),
            PolicySpec::Scripted("a/b.jsonl".into())
        );
        assert_eq!(
            "http:http://127.0.0.1:8000/v1#Qwen/Qwen3.5"
                .parse::<PolicySpec>()
                .unwrap(),
            PolicySpec::Http {
                url: "http://127.0.0.1:8000/v1".into(),
                model: "Qwen/Qwen3.5".into()
            }
        );
        let engine = |dir: &str, placement: &str| PolicySpec::Engine {
            dir: dir.into(),
            placement: placement.parse().unwrap(),
        };
        assert_eq!(
            "engine:/models/q".parse::<PolicySpec>().unwrap(),
            engine("/models/q", "cpu")
        );
        for (spec, dir, placement) in [
            ("engine:/models/q35@cuda", "/models/q35", "cuda:0"),
            ("engine:/models/q35@cuda:1", "/models/q35", "cuda:1"),
            ("engine:rel/q@emulator:f32", "rel/q", "emulator:f32"),
            ("engine:/a@b/q@cuda:0:bf16", "/a@b/q", "cuda:0:bf16"),
            ("engine:/x@y@cpu", "/x@y", "cpu"),
        ] {
            assert_eq!(spec.parse::<PolicySpec>().unwrap(), engine(dir, placement), "{spec}");
        }
    }

    #[test]
    fn rejects_bad_specs() {
        for s in [
            "",
            "scripted:",
            "foo:bar",
            "http:localhost:8000",
            "nocolon",
            "engine:/m@gpu",
            "engine:/m@cpu:bf16",
            "engine:/m@",
            "engine:@cuda",
            "engine:/m@cuda:x",
        ] {
            assert!(s.parse::<PolicySpec>().is_err(), "{s}");
        }
    }

    #[test]
    fn endpoint_forms() {
        let e = |u| HttpPolicyConfig::for_url(u, "m").endpoint;
        assert_eq!(e("http://h:1"), "http://h:1/v1/chat/completions");
        assert_eq!(e("http://h:1/v1/"), "http://h:1/v1/chat/completions");
        assert_eq!(
            e("http://h:1/v1/chat/completions"),
            "http://h:1/v1/chat/completions"
        );
    }
}
