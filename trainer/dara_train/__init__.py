"""A minimal FSDP2 + vLLM multi-reward RL trainer built on dara_kernels."""
