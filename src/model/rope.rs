//! Partial rotary position embedding (NeoX `rotate_half` on the first `rotary_dim` channels of a
//! head). Interleaved mRoPE reduces to this for text, where the T/H/W positions are equal.

/// Inverse frequencies for `rotary_dim` channels, computed in f32 as transformers does.
#[derive(Clone, Debug)]
pub struct Rope {
    inv_freq: Vec<f32>,
}

impl Rope {
    pub fn new(rotary_dim: usize, theta: f64) -> Self {
        let theta = theta as f32;
        let inv_freq = (0..rotary_dim / 2)
            .map(|i| 1.0 / theta.powf((2 * i) as f32 / rotary_dim as f32))
            .collect();
        Rope { inv_freq }
    }

    /// `(cos, sin)` of the `rotary_dim/2` angles at position `pos`.
    pub fn cos_sin(&self, pos: usize) -> (Vec<f32>, Vec<f32>) {
        self.inv_freq
            .iter()
            .map(|f| ((pos as f32) * f).cos())
            .zip(self.inv_freq.iter().map(|f| ((pos as f32) * f).sin()))
            .unzip()
    }

    /// Rotate one head vector in place with precomputed `cos`/`sin` (`rotary_dim/2` each).
    pub fn apply(head: &mut [f32], cos: &[f32], sin: &[f32]) {
        let half = cos.len();
        for i in 0..half {
            let (x1, x2) = (head[i], head[i + half]);
            head[i] = x1 * cos[i] - x2 * sin[i];
            head[i + half] = x2 * cos[i] + x1 * sin[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_preserves_norm_and_leaves_tail() {
        let r = Rope::new(8, 10000.0);
        let mut h: Vec<f32> = (0..12).map(|i| i as f32 * 0.3 - 1.0).collect();
        let orig = h.clone();
        let (c, s) = r.cos_sin(5);
        Rope::apply(&mut h, &c, &s);
        let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>();
        assert!((n(&h[..8]) - n(&orig[..8])).abs() < 1e-4);
        assert_eq!(&h[8..], &orig[8..]);
        let (c0, s0) = r.cos_sin(0);
        let mut z = orig.clone();
        Rope::apply(&mut z, &c0, &s0);
        assert_eq!(z, orig);
    }
}
