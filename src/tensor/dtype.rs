//! Storage dtypes of checkpoint tensors (f32, bf16, f16) and their conversion to the f32 compute
//! format of the CPU backend (bf16 weight matrices may also be kept as bf16, see `storage`).

use half::{bf16, f16};

/// A dtype the loader accepts for floating-point weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    BF16,
    F16,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::BF16 | DType::F16 => 2,
        }
    }

    /// Decode little-endian `bytes` of this dtype into f32 values.
    pub fn decode_to_f32(self, bytes: &[u8]) -> Vec<f32> {
        match self {
            DType::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            DType::BF16 => bytes
                .chunks_exact(2)
                .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
                .collect(),
            DType::F16 => bytes
                .chunks_exact(2)
                .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
                .collect(),
        }
    }
}

impl DType {
    /// Little-endian bf16 `bytes` as bf16 values (a copy for data that cannot be mapped in place).
    pub fn decode_bf16(bytes: &[u8]) -> Vec<bf16> {
        bytes
            .chunks_exact(2)
            .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_dtype() {
        let x = [1.5f32, -2.25, 0.0];
        let f32b: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(DType::F32.decode_to_f32(&f32b), x);
        let bb: Vec<u8> = x
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes())
            .collect();
        assert_eq!(DType::BF16.decode_to_f32(&bb), x);
        let hb: Vec<u8> = x
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_bits().to_le_bytes())
            .collect();
        assert_eq!(DType::F16.decode_to_f32(&hb), x);
    }
}
