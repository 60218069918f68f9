//! The Qwen3.5-format chat template in models/tokenizer/ rendered through `model::chat`, checked
//! against exact expected strings for the structures of the Qwen3.5 chat format.

use execcritic::model::chat::{ChatError, ChatOptions, ChatTemplate, Message};
use execcritic::model::toolcall::{parse_assistant, ParseOptions, ToolCall};
use serde_json::{json, Value};
use std::path::Path;

fn template() -> ChatTemplate {
    ChatTemplate::from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tokenizer")).unwrap()
}

fn bash_tool() -> Value {
    json!({"type": "function", "function": {"name": "bash", "description": "Run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"},
        "timeout": {"type": "integer"}}, "required": ["command"]}}})
}

fn call(name: &str, args: Value) -> ToolCall {
    ToolCall {
        name: name.into(),
        arguments: args.as_object().unwrap().clone(),
    }
}

const GEN: ChatOptions = ChatOptions {
    add_generation_prompt: true,
    enable_thinking: None,
};
const NO_GEN: ChatOptions = ChatOptions {
    add_generation_prompt: false,
    enable_thinking: None,
};

const TOOLS_PREAMBLE: &str = "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"bash\", \"description\": \"Run a command\", \"parameters\": {\"type\": \"object\", \"properties\": {\"command\": {\"type\": \"string\"}, \"timeout\": {\"type\": \"integer\"}}, \"required\": [\"command\"]}}}\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

fn tool_conversation() -> Vec<Message> {
    vec![
        Message::system("You are helpful."),
        Message::user("Fix the bug."),
        Message::assistant("Let me look.")
            .with_reasoning("Look first.")
            .with_tool_calls(vec![call("bash", json!({"command": "ls"}))]),
        Message::tool("a.py\nb.py"),
        Message::tool("second"),
        Message::assistant("")
            .with_reasoning("Found it.")
            .with_tool_calls(vec![
                call("bash", json!({"command": "cat a.py", "timeout": 30})),
                call("bash", json!({"command": "echo 'x\ny'"})),
            ]),
        Message::tool("print(1)"),
    ]
}

#[test]
fn multi_turn_with_tools() {
    let got = template()
        .render(&tool_conversation(), &[bash_tool()], GEN)
        .unwrap();
    let expected = [
        TOOLS_PREAMBLE,
        "\n\nYou are helpful.<|im_end|>\n",
        "<|im_start|>user\nFix the bug.<|im_end|>\n",
        "<|im_start|>assistant\n<think>\nLook first.\n</think>\n\nLet me look.\n\n<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\na.py\nb.py\n</tool_response>\n<tool_response>\nsecond\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\n<think>\nFound it.\n</think>\n\n<tool_call>\n<function=bash>\n<parameter=command>\ncat a.py\n</parameter>\n<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=bash>\n<parameter=command>\necho 'x\ny'\n</parameter>\n</function>\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\nprint(1)\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\n<think>\n",
    ]
    .concat();
    assert_eq!(got, expected);
}

#[test]
fn tools_without_system_message() {
    let got = template()
        .render(&[Message::user("hi")], &[bash_tool()], NO_GEN)
        .unwrap();
    assert_eq!(
        got,
        format!("{TOOLS_PREAMBLE}<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n")
    );
}

#[test]
fn reasoning_dropped_before_last_user_query() {
    let messages = vec![
        Message::system("  sys  "),
        Message::user("q1"),
        Message::assistant("a1").with_reasoning("r1"),
        Message::user("q2"),
        Message::assistant("a2").with_reasoning("\nr2\n"),
        // Reasoning written inline in the content is split out the same way.
        Message::assistant("<think>\nr3\n</think>\n\na3"),
    ];
    let got = template().render(&messages, &[], NO_GEN).unwrap();
    assert_eq!(
        got,
        "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n<|im_start|>assistant\n<think>\nr3\n</think>\n\na3<|im_end|>\n"
    );
    let earlier = vec![
        Message::user("q1"),
        Message::assistant("<think>\nr\n</think>\n\na"),
        Message::user("q2"),
    ];
    assert_eq!(
        template().render(&earlier, &[], NO_GEN).unwrap(),
        "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
    );
}

#[test]
fn generation_prompt_and_enable_thinking() {
    let m = [Message::user("hello")];
    let t = template();
    let on = t
        .render(
            &m,
            &[],
            ChatOptions {
                add_generation_prompt: true,
                enable_thinking: Some(true),
            },
        )
        .unwrap();
    let off = t
        .render(
            &m,
            &[],
            ChatOptions {
                add_generation_prompt: true,
                enable_thinking: Some(false),
            },
        )
        .unwrap();
    let default = t.render(&m, &[], GEN).unwrap();
    assert_eq!(
        on,
        "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n"
    );
    assert_eq!(
        off,
        "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
    assert_eq!(default, on);
}

#[test]
fn vision_parts_and_python_tojson() {
    let messages = json!([{"role": "user", "content": [
        {"type": "text", "text": "see "}, {"type": "image", "image": "x.png"}, {"type": "video", "video": "v"}]}]);
    let tools = [
        json!({"name": "f", "eps": 1.5e-7, "big": 1e16, "w": 2.0, "u": "ü<&>", "l": [1, {"a": null}]}),
    ];
    let got = template().render_json(&messages, &tools, NO_GEN).unwrap();
    assert!(got.contains("\n<tools>\n{\"name\": \"f\", \"eps\": 1.5e-07, \"big\": 1e+16, \"w\": 2.0, \"u\": \"ü<&>\", \"l\": [1, {\"a\": null}]}\n</tools>"), "{got}");
    assert!(got.ends_with("<|im_start|>user\nsee <|vision_start|><|image_pad|><|vision_end|><|vision_start|><|video_pad|><|vision_end|><|im_end|>\n"), "{got}");
}

#[test]
fn template_errors_are_reported() {
    let t = template();
    let err = t
        .render(&[Message::user("a"), Message::system("late")], &[], NO_GEN)
        .unwrap_err();
    assert!(
        matches!(&err, ChatError::Raised(m) if m == "System message must be at the beginning."),
        "{err}"
    );
    let err = t
        .render(&[Message::assistant("x")], &[], NO_GEN)
        .unwrap_err();
    assert!(
        matches!(&err, ChatError::Raised(m) if m == "No user query found in messages."),
        "{err}"
    );
    let err = ChatTemplate::from_source("{% if %}".into(), None, None).unwrap_err();
    assert!(matches!(err, ChatError::Syntax(_)));
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        ChatTemplate::from_dir(dir.path()).unwrap_err(),
        ChatError::NoTemplate(_)
    ));
}

#[test]
fn template_from_tokenizer_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = json!({"eos_token": {"content": "<E>"}, "chat_template": [
        {"name": "tool_use", "template": "no"},
        {"name": "default", "template": "{% for m in messages %}[{{ m.role }}:{{ m.content|trim }}]{% endfor %}{{ eos_token }}{{ 'x'.upper() }}"}]});
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
    let t = ChatTemplate::from_dir(dir.path()).unwrap();
    assert_eq!(
        t.render(&[Message::user(" hi ")], &[], NO_GEN).unwrap(),
        "[user:hi]<E>X"
    );
}

/// What the template renders for an assistant turn is what the tool-call parser reads back.
#[test]
fn rendered_tool_calls_parse_back() {
    let conv = tool_conversation();
    let text = template().render(&conv, &[bash_tool()], NO_GEN).unwrap();
    let turns: Vec<&str> = text
        .split("<|im_start|>assistant\n")
        .skip(1)
        .map(|t| t.split("<|im_end|>").next().unwrap())
        .collect();
    for (turn, msg) in turns
        .iter()
        .zip(conv.iter().filter(|m| !m.tool_calls.is_empty()))
    {
        let parsed = parse_assistant(turn, &[bash_tool()], ParseOptions::default()).unwrap();
        assert_eq!(parsed.tool_calls, msg.tool_calls);
        assert_eq!(parsed.content, msg.content);
        assert_eq!(parsed.reasoning, msg.reasoning_content);
    }
}

/// The next turn's prompt extends the previous prompt + the assistant's completion text + the
/// stop token, so the engine can resume a conversation from its cached state.
#[test]
fn next_turn_prompt_extends_prompt_and_completion() {
    let t = template();
    let tools = [bash_tool()];
    let mut conv = vec![
        Message::system("You are helpful."),
        Message::user("Fix the bug."),
    ];
    let prompt1 = t.render(&conv, &tools, GEN).unwrap();
    let completion = "Look first.\n</think>\n\nI will list.\n\n<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n</parameter>\n<parameter=timeout>\n5\n</parameter>\n</function>\n</tool_call>";
    let turn = parse_assistant(
        completion,
        &tools,
        ParseOptions {
            prompt_opened_think: true,
        },
    )
    .unwrap();
    conv.push(
        Message::assistant(turn.content)
            .with_reasoning(turn.reasoning.unwrap())
            .with_tool_calls(turn.tool_calls),
    );
    conv.push(Message::tool("a.py"));
    let prompt2 = t.render(&conv, &tools, GEN).unwrap();
    let head = format!("{prompt1}{completion}<|im_end|>");
    assert!(prompt2.starts_with(&head), "{prompt2}");
    assert_eq!(&prompt2[head.len()..], "\n<|im_start|>user\n<tool_response>\na.py\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n");
}

/// A template is untrusted input (it comes with any model folder): loops over loops and large
/// repeated output stop with a typed `Bound` error instead of running for hours or filling
/// memory. Without the bounds the first would render 10¹⁰ characters, the second 10¹² bytes.
#[test]
fn hostile_templates_stop_at_their_bounds() {
    let msgs = [Message::user("hi")];
    for (what, src) in [
        ("nested loops", "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}"),
        ("repeated large output", "{% for a in range(100000) %}{{ 'x' * 10000000 }}{% endfor %}"),
        ("loop without output", "{% for a in range(100000) %}{% for b in range(100000) %}{% set c = a %}{% endfor %}{% endfor %}"),
    ] {
        let t = ChatTemplate::from_source(src.into(), None, None).unwrap();
        match t.render(&msgs, &[], GEN) {
            Err(ChatError::Bound(m)) => println!("{what}: {m}"),
            other => panic!("{what}: expected a Bound error, got {other:?}"),
        }
    }
}

/// The bounds leave real use far behind: the Qwen3.5 template renders 1,000 messages with tools,
/// tool calls and reasoning.
#[test]
fn long_conversations_render_within_the_bounds() {
    let mut msgs = vec![Message::system("You are helpful.")];
    for i in 0..200 {
        msgs.extend(tool_conversation().into_iter().skip(1).take(5).map(|m| match m.role {
            execcritic::model::chat::Role::User => Message::user(format!("step {i}")),
            _ => m,
        }));
    }
    assert!(msgs.len() > 1000);
    let got = template().render(&msgs, &[bash_tool()], GEN).unwrap();
    assert!(got.contains("\nstep 0<") && got.contains("\nstep 199<"), "{}", &got[got.len() - 300..]);
    // Three calls per step, plus two in the tools preamble's format instructions.
    assert_eq!(got.matches("<tool_call>").count(), 602, "every call rendered");
}
