//! SFT data from conversations: a conversation (system, user, assistant turns with tool calls,
//! tool observations) rendered with the checkpoint's own chat template into token ids and a mask
//! that is true exactly on assistant-generated tokens — the turn's reasoning, content, tool-call
//! XML and the closing end-of-turn token — and false on system, user and tool tokens and on the
//! template's assistant header (the generation prompt).
//!
//! What "assistant-generated" means is taken from the template itself, not from its markup: for
//! assistant turn `i`, `P` = the conversation before it rendered with the generation prompt (what
//! the model reads before writing the turn) and `Q` = the conversation through it; the turn is
//! `Q[len(P)..]` up to and including the last end-of-turn token (`eos_token`). Templates that
//! re-render earlier turns (Qwen3.5 drops the reasoning of turns before the last user query) make
//! a single rendering of the whole conversation disagree with what the model read at some turns;
//! such turns start a separate sequence, so every trained turn follows exactly its generation
//! prompt. A plain agent run (one user query, then tool observations) is one sequence.
//!
//! Tokenisation is per segment (prompt text, assistant span, prompt text, …): an assistant span
//! starts at a token boundary, as it did when the model generated it after its prompt.

use super::error::{Result, TrainError};
use super::trainer::SftExample;
use crate::model::chat::{ChatOptions, ChatTemplate, Message, Role};
use crate::model::tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::ops::Range;

/// One conversation to train on: messages and the tools declared to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Vec<Value>,
}

/// A rendered training sequence and the byte ranges of its assistant-generated text.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedSequence {
    pub text: String,
    /// Sorted, disjoint.
    pub assistant: Vec<Range<usize>>,
}

fn render(template: &ChatTemplate, conv: &Conversation, upto: usize, generation: bool) -> Result<String> {
    let opts = ChatOptions { add_generation_prompt: generation, enable_thinking: None };
    template
        .render(&conv.messages[..upto], &conv.tools, opts)
        .map_err(|e| TrainError::BadInput(format!("rendering messages 0..{upto}: {e}")))
}

/// Render a conversation into the fewest sequences in which every assistant turn follows exactly
/// its generation prompt (see the module docs). `eos` is the template's end-of-turn text.
pub fn render_sequences(template: &ChatTemplate, eos: &str, conv: &Conversation) -> Result<Vec<RenderedSequence>> {
    if eos.is_empty() {
        return Err(TrainError::BadInput("the tokenizer has no eos_token to end assistant turns".into()));
    }
    let turns: Vec<usize> =
        conv.messages.iter().enumerate().filter(|(_, m)| m.role == Role::Assistant).map(|(i, _)| i).collect();
    if turns.is_empty() {
        return Err(TrainError::BadInput("the conversation has no assistant turn to train on".into()));
    }
    let mut current = RenderedSequence { text: render(template, conv, conv.messages.len(), false)?, assistant: vec![] };
    let mut done: Vec<RenderedSequence> = Vec::new();
    for &i in turns.iter().rev() {
        let prompt = render(template, conv, i, true)?;
        let through = render(template, conv, i + 1, false)?;
        let turn = through.strip_prefix(prompt.as_str()).ok_or_else(|| {
            TrainError::BadInput(format!(
                "message {i}: the template does not render this assistant turn as a continuation of its generation prompt"
            ))
        })?;
        let end = prompt.len()
            + turn.rfind(eos).map(|p| p + eos.len()).ok_or_else(|| {
                TrainError::BadInput(format!("message {i}: the rendered assistant turn has no {eos:?}"))
            })?;
        let span = prompt.len()..end;
        if !current.text.starts_with(&through[..end]) {
            let next = RenderedSequence { text: through, assistant: vec![] };
            done.push(std::mem::replace(&mut current, next));
        }
        current.assistant.insert(0, span);
    }
    done.push(current);
    done.retain(|s| !s.assistant.is_empty());
    done.reverse();
    Ok(done)
}

/// Tokenise a rendered sequence segment by segment; the mask is true on assistant segments.
pub fn tokenize_sequence(tokenizer: &Tokenizer, seq: &RenderedSequence) -> Result<SftExample> {
    let (mut ids, mut mask) = (Vec::new(), Vec::new());
    let mut push = |text: &str, trained: bool| -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let t = tokenizer.encode(text).map_err(|e| TrainError::BadInput(e.to_string()))?;
        mask.resize(mask.len() + t.len(), trained);
        ids.extend(t);
        Ok(())
    };
    let mut at = 0;
    for r in &seq.assistant {
        push(&seq.text[at..r.start], false)?;
        push(&seq.text[r.clone()], true)?;
        at = r.end;
    }
    push(&seq.text[at..], false)?;
    if ids.len() < 2 {
        return Err(TrainError::BadInput("a rendered conversation has fewer than 2 tokens".into()));
    }
    Ok(SftExample { ids, mask })
}

/// The SFT examples of one conversation (usually one).
pub fn conversation_examples(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    conv: &Conversation,
) -> Result<Vec<SftExample>> {
    let eos = tokenizer.eos_token().unwrap_or_default().to_string();
    render_sequences(template, &eos, conv)?.iter().map(|s| tokenize_sequence(tokenizer, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A template that drops the reasoning of turns before the last user message, as Qwen3.5's.
    fn template() -> ChatTemplate {
        let src = "{%- set ns = namespace(last=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}\
{%- for m in messages %}<|s|>{{ m.role }}\n{% if m.role == 'assistant' and loop.index0 > ns.last %}<t>{{ m.reasoning_content or '' }}</t>{% endif %}{{ m.content }}<|e|>\n{% endfor %}\
{%- if add_generation_prompt %}<|s|>assistant\n<t>{%- endif %}";
        ChatTemplate::from_source(src.into(), None, Some("<|e|>".into())).unwrap()
    }

    fn conv(ms: Vec<Message>) -> Conversation {
        Conversation { messages: ms, tools: vec![] }
    }

    fn spans(s: &RenderedSequence) -> Vec<&str> {
        s.assistant.iter().map(|r| &s.text[r.clone()]).collect()
    }

    #[test]
    fn one_sequence_when_the_template_is_prefix_stable() {
        let c = conv(vec![
            Message::user("q"),
            Message::assistant("a1").with_reasoning("r1"),
            Message::tool("o"),
            Message::assistant("a2"),
        ]);
        let seqs = render_sequences(&template(), "<|e|>", &c).unwrap();
        assert_eq!(seqs.len(), 1);
        assert_eq!(spans(&seqs[0]), vec!["r1</t>a1<|e|>", "</t>a2<|e|>"]);
        assert!(seqs[0].text.starts_with("<|s|>user\nq<|e|>\n<|s|>assistant\n<t>r1"));
    }

    #[test]
    fn a_later_user_query_splits_the_sequence() {
        // The full rendering drops r1 (a user turn follows it); turn 1 is trained in a sequence of
        // its own, where it follows its real generation prompt.
        let c = conv(vec![
            Message::user("q"),
            Message::assistant("a1").with_reasoning("r1"),
            Message::user("q2"),
            Message::assistant("a2").with_reasoning("r2"),
        ]);
        let seqs = render_sequences(&template(), "<|e|>", &c).unwrap();
        assert_eq!(seqs.len(), 2);
        assert_eq!(spans(&seqs[0]), vec!["r1</t>a1<|e|>"]);
        assert_eq!(spans(&seqs[1]), vec!["r2</t>a2<|e|>"]);
        assert!(seqs[1].text.contains("<|s|>assistant\na1<|e|>"), "{}", seqs[1].text);
    }

    #[test]
    fn bad_conversations_are_errors() {
        assert!(render_sequences(&template(), "<|e|>", &conv(vec![Message::user("q")])).is_err());
        let c = conv(vec![Message::user("q"), Message::assistant("a")]);
        assert!(render_sequences(&template(), "", &c).is_err());
        assert!(render_sequences(&template(), "<|nope|>", &c).is_err());
    }
}
