//! Agent layer: the bash-tool turn loop, tool-call and marker parsing, prompts.
