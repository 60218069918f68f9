//! Harness layer: sandboxes, bundle validation, selectors, execution, log parsing,
//! classification, gates, feedback envelope and official grading. Knows nothing of models.
