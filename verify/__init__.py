"""vllm-patchbench: patch series against pinned vLLM releases, and the tooling that proves them."""
