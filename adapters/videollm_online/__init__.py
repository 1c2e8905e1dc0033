"""The `videollm-online` adapter: VideoLLM-online (Chen et al., CVPR 2024; showlab/videollm-online)
run natively, frame by frame, on its own KV cache.

`checkpoint` reads the published format (a PEFT LoRA adapter with the connector beside it)
and merges it into the base Llama; `model` is the network (Llama, SigLIP frame encoder,
connector) and imports torch and transformers, so only the adapter's constructor imports it;
`stream` is one session's conversation in the model's format and its per-frame decision;
`adapter` holds the options and the hooks.

May import: chat_prompts, config, errors, hf, sdk.
"""
