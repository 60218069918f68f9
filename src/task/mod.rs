//! Task layer: SWE-bench task instances (schema + extensions), bundled suites, repository
//! materialisation and history sanitisation. Knows nothing of models.
