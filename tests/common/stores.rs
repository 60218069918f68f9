//! Comparing two sets of trained weights in the tests.
#![allow(dead_code)]

use execcritic::train::network::TrainModel;

/// Largest |a − b| over two stores of the same parameters (names and shapes checked).
pub fn max_diff(a: &TrainModel, b: &TrainModel) -> f32 {
    assert_eq!(a.store.len(), b.store.len(), "parameter count");
    let mut worst = 0f32;
    for (x, y) in a.store.params.iter().zip(&b.store.params) {
        assert_eq!((&x.name, &x.shape), (&y.name, &y.shape));
        worst = x.data.iter().zip(&y.data).fold(worst, |m, (p, q)| m.max((p - q).abs()));
    }
    worst
}
