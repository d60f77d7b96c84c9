"""The measuring half of `costmodel validate` and of the engine checks: serving a validation's loads
on a real engine (transformers on a GPU: gpu.py; vLLM: vllm_campaign.py) and fitting what the check
reads (engine_campaign.py). Scoring the recordings against the simulator is simulate/validate's."""
