//! The checkpoint tensors of each block — name (without the decoder prefix) and shape, from the
//! config — written once for the loaders of every backend (`StackLoader` implementations).

use crate::model::config::ModelConfig;

/// One checkpoint tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub shape: Vec<usize>,
}

fn param(prefix: &str, name: &str, shape: &[usize]) -> Param {
    Param {
        name: format!("{prefix}{name}"),
        shape: shape.to_vec(),
    }
}

/// Gated full attention (`…self_attn.`): q and its gate share one projection.
pub struct AttentionParams {
    pub q_proj: Param,
    pub k_proj: Param,
    pub v_proj: Param,
    pub o_proj: Param,
    pub q_norm: Param,
    pub k_norm: Param,
}

impl AttentionParams {
    pub fn new(p: &str, c: &ModelConfig) -> Self {
        let (h, hq, hkv, hd) = (
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
        );
        AttentionParams {
            q_proj: param(p, "q_proj.weight", &[2 * hq * hd, h]),
            k_proj: param(p, "k_proj.weight", &[hkv * hd, h]),
            v_proj: param(p, "v_proj.weight", &[hkv * hd, h]),
            o_proj: param(p, "o_proj.weight", &[h, hq * hd]),
            q_norm: param(p, "q_norm.weight", &[hd]),
            k_norm: param(p, "k_norm.weight", &[hd]),
        }
    }
}

/// Gated DeltaNet (`…linear_attn.`).
pub struct GdnParams {
    pub in_proj_qkv: Param,
    pub in_proj_z: Param,
    pub in_proj_b: Param,
    pub in_proj_a: Param,
    /// `[conv_dim, 1, kernel]`
    pub conv1d: Param,
    pub dt_bias: Param,
    pub a_log: Param,
    pub norm: Param,
    pub out_proj: Param,
}

impl GdnParams {
    pub fn new(p: &str, c: &ModelConfig) -> Self {
        let h = c.hidden_size;
        let (cd, vd, hv, k) = (
            c.gdn_conv_dim(),
            c.gdn_value_dim(),
            c.linear_num_value_heads,
            c.linear_conv_kernel_dim,
        );
        GdnParams {
            in_proj_qkv: param(p, "in_proj_qkv.weight", &[cd, h]),
            in_proj_z: param(p, "in_proj_z.weight", &[vd, h]),
            in_proj_b: param(p, "in_proj_b.weight", &[hv, h]),
            in_proj_a: param(p, "in_proj_a.weight", &[hv, h]),
            conv1d: param(p, "conv1d.weight", &[cd, 1, k]),
            dt_bias: param(p, "dt_bias", &[hv]),
            a_log: param(p, "A_log", &[hv]),
            norm: param(p, "norm.weight", &[c.linear_value_head_dim]),
            out_proj: param(p, "out_proj.weight", &[h, vd]),
        }
    }
}

/// One SwiGLU feed-forward (a routed expert or the shared expert).
pub struct FfnParams {
    pub gate: Param,
    pub up: Param,
    pub down: Param,
}

/// MoE with shared expert (`…mlp.`): the routed experts either fused (`gate_up` `[E, 2I, H]`,
/// `down` `[E, H, I]`) or per expert ([`MoeParams::expert`]).
pub struct MoeParams {
    pub router: Param,
    pub fused_gate_up: Param,
    pub fused_down: Param,
    pub shared: FfnParams,
    pub shared_gate: Param,
    prefix: String,
    hidden: usize,
    inter: usize,
}

impl MoeParams {
    pub fn new(p: &str, c: &ModelConfig) -> Self {
        let (h, e, i, is) = (
            c.hidden_size,
            c.num_experts,
            c.moe_intermediate_size,
            c.shared_expert_intermediate_size,
        );
        MoeParams {
            router: param(p, "gate.weight", &[e, h]),
            fused_gate_up: param(p, "experts.gate_up_proj", &[e, 2 * i, h]),
            fused_down: param(p, "experts.down_proj", &[e, h, i]),
            shared: FfnParams {
                gate: param(p, "shared_expert.gate_proj.weight", &[is, h]),
                up: param(p, "shared_expert.up_proj.weight", &[is, h]),
                down: param(p, "shared_expert.down_proj.weight", &[h, is]),
            },
            shared_gate: param(p, "shared_expert_gate.weight", &[1, h]),
            prefix: p.to_string(),
            hidden: h,
            inter: i,
        }
    }

    /// Routed expert `x` in the per-expert layout.
    pub fn expert(&self, x: usize) -> FfnParams {
        let (p, h, i) = (
            format!("{}experts.{x}.", self.prefix),
            self.hidden,
            self.inter,
        );
        FfnParams {
            gate: param(&p, "gate_proj.weight", &[i, h]),
            up: param(&p, "up_proj.weight", &[i, h]),
            down: param(&p, "down_proj.weight", &[h, i]),
        }
    }
}
