//! The one layer sequence (`model::forward`, `model::backward`) and the one loading skeleton
//! (`Stack::load`) driven by a tracing backend: the ops come in the Qwen3.5 order for the
//! config's layer types, every tensor name is asked for once, and the backward is the exact
//! reverse with each residual gradient accumulated.

use execcritic::model::backend::{Backend, Layer, Site, Stack, StackLoader, WeightTypes};
use execcritic::model::backward::{backward, BackwardOps};
use execcritic::model::forward::forward;
use execcritic::model::ModelConfig;

/// Weights are the names they were loaded under.
struct Names;
impl WeightTypes for Names {
    type Embed = String;
    type Norm = String;
    type Attention = String;
    type Gdn = String;
    type Moe = String;
    type Head = String;
}

#[derive(Default)]
struct Loader(Vec<String>);
impl Loader {
    fn take(&mut self, n: &str) -> Result<String, String> {
        self.0.push(n.to_string());
        Ok(n.to_string())
    }
}
impl StackLoader<Names> for Loader {
    type Error = String;
    fn embed(&mut self, n: &str, _: [usize; 2]) -> Result<String, String> {
        self.take(n)
    }
    fn norm(&mut self, n: &str, _: usize) -> Result<String, String> {
        self.take(n)
    }
    fn attention(&mut self, p: &str, _: &ModelConfig) -> Result<String, String> {
        self.take(p)
    }
    fn gdn(&mut self, p: &str, _: &ModelConfig) -> Result<String, String> {
        self.take(p)
    }
    fn moe(&mut self, p: &str, _: &ModelConfig) -> Result<String, String> {
        self.take(p)
    }
    fn head(&mut self, n: &str, _: [usize; 2]) -> Result<String, String> {
        self.take(n)
    }
    fn tied_head(&mut self, e: &String) -> Result<String, String> {
        self.take(&format!("tied:{e}"))
    }
}

/// Records every op; the residual is the list of block outputs added to it so far.
#[derive(Default)]
struct Trace(Vec<String>);
impl Backend for Trace {
    type W = Names;
    type Hidden = Vec<String>;
    type Normed = String;
    type Delta = String;
    type Out = Vec<String>;
    type Error = String;
    fn embed(&mut self, w: &String) -> Result<Vec<String>, String> {
        self.0.push(format!("embed {w}"));
        Ok(vec![])
    }
    fn add_norm(
        &mut self,
        site: Site,
        x: &mut Vec<String>,
        d: Option<String>,
        w: &String,
    ) -> Result<String, String> {
        x.extend(d);
        self.0.push(format!("{site:?} {w} after {}", x.join("+")));
        Ok(format!("n({w})"))
    }
    fn attention(&mut self, li: usize, w: &String, u: String) -> Result<String, String> {
        self.0.push(format!("attention {li} {w} on {u}"));
        Ok(format!("att{li}"))
    }
    fn gdn(&mut self, li: usize, w: &String, u: String) -> Result<String, String> {
        self.0.push(format!("gdn {li} {w} on {u}"));
        Ok(format!("gdn{li}"))
    }
    fn moe(&mut self, li: usize, w: &String, u: String) -> Result<String, String> {
        self.0.push(format!("moe {li} {w} on {u}"));
        Ok(format!("moe{li}"))
    }
    fn head(&mut self, u: String, w: &String) -> Result<Vec<String>, String> {
        self.0.push(format!("head {w} on {u}"));
        Ok(std::mem::take(&mut self.0))
    }
}

/// Gradients are the list of ops they went through.
#[derive(Default)]
struct BackTrace(Vec<String>);
impl BackTrace {
    fn op(&mut self, what: String, dy: &[String]) -> Result<Vec<String>, String> {
        self.0.push(format!("{what} <- {}", dy.join(",")));
        Ok(vec![what])
    }
}
impl BackwardOps for BackTrace {
    type W = Names;
    type Grad = Vec<String>;
    type Error = String;
    fn head_backward(&mut self, w: &String) -> Result<Vec<String>, String> {
        self.op(format!("head {w}"), &[])
    }
    fn norm_backward(
        &mut self,
        s: Site,
        w: &String,
        dy: &Vec<String>,
    ) -> Result<Vec<String>, String> {
        self.op(format!("{s:?} {w}"), dy)
    }
    fn attention_backward(
        &mut self,
        li: usize,
        _: &String,
        dy: &Vec<String>,
    ) -> Result<Vec<String>, String> {
        self.op(format!("attention {li}"), dy)
    }
    fn gdn_backward(
        &mut self,
        li: usize,
        _: &String,
        dy: &Vec<String>,
    ) -> Result<Vec<String>, String> {
        self.op(format!("gdn {li}"), dy)
    }
    fn moe_backward(
        &mut self,
        li: usize,
        _: &String,
        dy: &Vec<String>,
    ) -> Result<Vec<String>, String> {
        self.op(format!("moe {li}"), dy)
    }
    fn accumulate(&mut self, acc: &mut Vec<String>, g: Vec<String>) -> Result<(), String> {
        acc.extend(g);
        Ok(())
    }
    fn embed_backward(&mut self, w: &String, dx: Vec<String>) -> Result<(), String> {
        self.0.push(format!("embed {w} <- {}", dx.join(",")));
        Ok(())
    }
    fn prepare_layer(&mut self, li: usize, _: &Layer<Names>) -> Result<(), String> {
        self.0.push(format!("prepare {li}"));
        Ok(())
    }
}

/// Two GDN layers then one attention layer, untied head.
fn config(tied: bool) -> ModelConfig {
    let text = serde_json::json!({
        "model_type": "qwen3_5_moe_text", "vocab_size": 64, "hidden_size": 8,
        "num_hidden_layers": 3, "layer_types": ["linear_attention", "linear_attention", "full_attention"],
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "linear_num_key_heads": 1,
        "linear_num_value_heads": 2, "linear_key_head_dim": 4, "linear_value_head_dim": 4,
        "linear_conv_kernel_dim": 4, "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 4, "shared_expert_intermediate_size": 4, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000, "partial_rotary_factor": 0.5},
        "tie_word_embeddings": tied
    });
    ModelConfig::from_json_str(&text.to_string(), std::path::Path::new("trace")).unwrap()
}

#[test]
fn stack_load_names_every_tensor_once_in_layer_order() {
    let mut ld = Loader::default();
    let st = Stack::<Names>::load(&config(false), &mut ld).unwrap();
    assert_eq!(st.layers.len(), 3);
    assert_eq!(
        ld.0,
        [
            "embed_tokens.weight",
            "layers.0.input_layernorm.weight",
            "layers.0.linear_attn.",
            "layers.0.post_attention_layernorm.weight",
            "layers.0.mlp.",
            "layers.1.input_layernorm.weight",
            "layers.1.linear_attn.",
            "layers.1.post_attention_layernorm.weight",
            "layers.1.mlp.",
            "layers.2.input_layernorm.weight",
            "layers.2.self_attn.",
            "layers.2.post_attention_layernorm.weight",
            "layers.2.mlp.",
            "norm.weight",
            "lm_head.weight",
        ]
    );
    let tied = Stack::<Names>::load(&config(true), &mut Loader::default()).unwrap();
    assert_eq!(tied.head, "tied:embed_tokens.weight");
}

#[test]
fn forward_is_the_qwen35_layer_sequence() {
    let st = Stack::<Names>::load(&config(false), &mut Loader::default()).unwrap();
    let ops = forward(&mut Trace::default(), &st).unwrap();
    let l = |i: usize| format!("layers.{i}.");
    let mut want = vec!["embed embed_tokens.weight".to_string()];
    let mut resid: Vec<String> = vec![];
    for (i, mixer) in ["gdn", "gdn", "attention"].iter().enumerate() {
        let kind = if *mixer == "gdn" {
            "linear_attn."
        } else {
            "self_attn."
        };
        want.push(format!(
            "Input({i}) {}input_layernorm.weight after {}",
            l(i),
            resid.join("+")
        ));
        want.push(format!(
            "{mixer} {i} {}{kind} on n({}input_layernorm.weight)",
            l(i),
            l(i)
        ));
        resid.push(format!(
            "{}{i}",
            if *mixer == "gdn" { "gdn" } else { "att" }
        ));
        want.push(format!(
            "Post({i}) {}post_attention_layernorm.weight after {}",
            l(i),
            resid.join("+")
        ));
        want.push(format!(
            "moe {i} {}mlp. on n({}post_attention_layernorm.weight)",
            l(i),
            l(i)
        ));
        resid.push(format!("moe{i}"));
    }
    want.push(format!("Final norm.weight after {}", resid.join("+")));
    want.push("head lm_head.weight on n(norm.weight)".into());
    assert_eq!(ops, want);
}

#[test]
fn backward_is_the_reverse_with_residual_gradients() {
    let st = Stack::<Names>::load(&config(true), &mut Loader::default()).unwrap();
    let mut b = BackTrace::default();
    backward(&mut b, &st).unwrap();
    let l = |i: usize| format!("layers.{i}.");
    let mut want = vec![
        "head tied:embed_tokens.weight <- ".to_string(),
        "Final norm.weight <- head tied:embed_tokens.weight".into(),
    ];
    // The gradient w.r.t. a layer's output, as the list of ops it accumulated.
    let mut dx = vec!["Final norm.weight".to_string()];
    for (i, mixer) in [(2, "attention"), (1, "gdn"), (0, "gdn")] {
        want.push(format!("prepare {i}"));
        want.push(format!("moe {i} <- {}", dx.join(",")));
        want.push(format!(
            "Post({i}) {}post_attention_layernorm.weight <- moe {i}",
            l(i)
        ));
        dx.push(format!("Post({i}) {}post_attention_layernorm.weight", l(i)));
        want.push(format!("{mixer} {i} <- {}", dx.join(",")));
        want.push(format!(
            "Input({i}) {}input_layernorm.weight <- {mixer} {i}",
            l(i)
        ));
        dx.push(format!("Input({i}) {}input_layernorm.weight", l(i)));
    }
    want.push(format!("embed embed_tokens.weight <- {}", dx.join(",")));
    assert_eq!(b.0, want);
}
