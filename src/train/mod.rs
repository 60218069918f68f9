//! Train layer: backward passes, SFT and GRPO losses, AdamW, LoRA and Hugging Face checkpoints.
