"""Measuring a live OpenAI-compatible deployment: async streaming load generator (client),
server-sent events (sse), failure accounting (failures), Prometheus /metrics (metrics),
`vllm bench serve` imports (bench_import), inputs for `costmodel fit` (fitdata)."""
