"""Validation of the simulator against vLLM's own scheduler, step by step (`costmodel validate
--engine vllm`): campaign (servers and loads), replay (the simulator on the recorded requests),
score (per load, per step, per request)."""
