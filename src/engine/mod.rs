//! Engine layer: batched generation over the model — continuous batching, per-sequence caches
//! (attention KV, Gated DeltaNet conv/recurrent state), sampling with log-probabilities, routing
//! records.
