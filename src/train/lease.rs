//! `ParamLease`: the trainer's parameters lent to an engine model without a copy. Building a
//! [`crate::model::Model`] from the lease (it is a [`WeightSource`]) MOVES each parameter's
//! `Vec<f32>` into an owned tensor [`Storage`] and remembers what it handed out; once the
//! engine and its model are dropped, [`ParamLease::reclaim`] takes every buffer back (the same
//! allocations) and rebuilds the [`ParamStore`] in the same order, so every [`super::Pid`] and
//! the optimizer state stay valid. A buffer that is still shared is an error, never a copy.

use super::error::{Result, TrainError};
use super::params::{Param, ParamStore};
use crate::model::source::WeightSource;
use crate::model::ModelError;
use crate::tensor::{Storage, Tensor};
use std::collections::HashMap;

/// Where one parameter's buffer is.
enum Slot {
    Held(Vec<f32>),
    Lent(Storage),
    /// Transiently empty while a buffer moves (never observable from outside).
    Moving,
}

pub struct ParamLease {
    names: Vec<String>,
    shapes: Vec<Vec<usize>>,
    slots: Vec<Slot>,
    index: HashMap<String, usize>,
    /// `model.language_model.` or `model.` (from the parameter names, as [`crate::model::checkpoint::Checkpoint`] does).
    prefix: &'static str,
}

impl ParamLease {
    /// Take `store` over for lending. Nothing is copied.
    pub fn new(store: ParamStore) -> Self {
        let prefix = if store.params.iter().any(|p| p.name.starts_with("model.language_model.")) {
            "model.language_model."
        } else {
            "model."
        };
        let mut lease = ParamLease {
            names: vec![],
            shapes: vec![],
            slots: vec![],
            index: HashMap::new(),
            prefix,
        };
        for (i, p) in store.params.into_iter().enumerate() {
            lease.index.insert(p.name.clone(), i);
            lease.names.push(p.name);
            lease.shapes.push(p.shape);
            lease.slots.push(Slot::Held(p.data));
        }
        lease
    }

    /// Names of the parameters currently lent out.
    pub fn lent(&self) -> Vec<&str> {
        self.slots
            .iter()
            .zip(&self.names)
            .filter(|(s, _)| matches!(s, Slot::Lent(_)))
            .map(|(_, n)| n.as_str())
            .collect()
    }

    /// Take every buffer back and rebuild the store in its original order. Fails (naming the
    /// parameters) while any lent buffer is still referenced — by a model, an engine, or a
    /// tensor view — and then keeps the lease intact so the caller can drop the holder and retry.
    pub fn reclaim(&mut self) -> Result<ParamStore> {
        let mut busy = Vec::new();
        for (slot, name) in self.slots.iter_mut().zip(&self.names) {
            *slot = match std::mem::replace(slot, Slot::Moving) {
                Slot::Lent(storage) => match storage.into_vec() {
                    Ok(v) => Slot::Held(v),
                    Err(s) => {
                        busy.push(name.clone());
                        Slot::Lent(s)
                    }
                },
                held => held,
            };
        }
        if !busy.is_empty() {
            return Err(TrainError::StillLent {
                count: busy.len(),
                first: format!("parameter buffers, e.g. {}", busy[0]),
            });
        }
        let params = std::mem::take(&mut self.slots)
            .into_iter()
            .zip(std::mem::take(&mut self.names))
            .zip(std::mem::take(&mut self.shapes))
            .map(|((slot, name), shape)| match slot {
                Slot::Held(data) => Param { name, shape, data },
                Slot::Lent(_) | Slot::Moving => unreachable!("every slot was reclaimed above"),
            })
            .collect();
        self.index.clear();
        Ok(ParamStore { params })
    }
}

impl WeightSource for ParamLease {
    fn full_name(&self, name: &str) -> String {
        format!("{}{}", self.prefix, name)
    }

    fn contains(&self, name: &str) -> bool {
        self.index.contains_key(&self.full_name(name))
    }

    /// Hand out parameter `full` as a tensor over its own buffer (moved, not copied); asking
    /// twice shares the one buffer.
    fn get_exact(&mut self, full: &str, shape: &[usize]) -> std::result::Result<Tensor, ModelError> {
        let &i = self
            .index
            .get(full)
            .ok_or_else(|| ModelError::MissingTensor(full.to_string()))?;
        if self.shapes[i] != shape {
            return Err(ModelError::ShapeMismatch {
                name: full.to_string(),
                expected: shape.to_vec(),
                found: self.shapes[i].clone(),
            });
        }
        let storage = match std::mem::replace(&mut self.slots[i], Slot::Moving) {
            Slot::Held(v) => Storage::owned(v),
            Slot::Lent(s) => s,
            Slot::Moving => unreachable!("slots are never left moving"),
        };
        self.slots[i] = Slot::Lent(storage.clone());
        Ok(Tensor::from_storage(shape.to_vec(), storage))
    }
}
