//! Episode layer: the Test episode, the Repair controller and the paper's rewards.

pub mod rewards;
