//! The agent's only tool, `bash`, declared as an OpenAI function schema (the chat template renders
//! it in the model's native tool format).

use serde_json::{json, Value};

/// The `tools` list of every agent request.
pub fn bash_tools() -> Vec<Value> {
    vec![json!({
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run one bash command line in the repository shell (/testbed) and return its exit code and output. Each call runs in a fresh bash process; files persist between calls, shell state (cd, variables) does not.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "description": "The bash command line to run."
                    }
                },
                "required": ["command"]
            }
        }
    })]
}
