"""The endpoint backend's `costmodel measure` options (--endpoint URL): measure/endpoint/loadtest.py
checks them and runs the loads. Parameter names are the fields of `LoadTestOptions`."""

from __future__ import annotations

import click

OPTIONS = [
    click.option("--qps", default=None, help="Endpoint: offered load in requests/s; a comma list runs one load per rate; 'inf' sends all at once (use with --concurrency)."),
    click.option("--concurrency", type=int, default=None, help="Endpoint: most requests in flight (default: unbounded, a pure open loop)."),
    click.option("--arrivals", type=click.Choice(["poisson", "gamma", "constant"]), default="poisson", show_default=True, help="Endpoint: arrival process."),
    click.option("--arrival-cv", type=float, default=1.0, show_default=True, help="Endpoint, gamma arrivals: coefficient of variation of the gaps (3: bursty)."),
    click.option("--prompts", "prompts_file", type=click.Path(), default=None, help="Endpoint: JSONL ({prompt|messages, prompt_id, regime, max_tokens}) or text file, one prompt per line (default: the probe suite)."),
    click.option("--regimes", default=None, help="Endpoint: keep prompts of these regimes (comma list)."),
    click.option("--max-tokens", type=int, default=512, show_default=True, help="Endpoint: max_tokens per request (a prompt's own max_tokens wins)."),
    click.option("--duration", type=float, default=None, help="Endpoint: seconds of arrivals per load."),
    click.option("--requests", "n_requests", type=int, default=None, help="Endpoint: requests per load."),
    click.option("--metrics-url", default=None, help="Endpoint: Prometheus URL (default: ENDPOINT root + /metrics; 'none' to skip)."),
    click.option("--metrics-interval", type=float, default=1.0, show_default=True, help="Endpoint: seconds between /metrics scrapes during a load."),
    click.option("--api-key-env", default=None, help="Endpoint: name of the environment variable holding the API key (the key is never written)."),
    click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True, help="Endpoint: seconds a request may take end to end before it counts as failed."),
    click.option("--api", type=click.Choice(["chat", "completions"]), default="chat", show_default=True, help="Endpoint: /v1/chat/completions or /v1/completions."),
    click.option("--ignore-eos", is_flag=True, help="Endpoint: ask the server to generate max_tokens regardless of EOS (vLLM's ignore_eos)."),
    click.option("--continuous-usage/--no-continuous-usage", default=True, show_default=True,
                 help="Endpoint: ask for usage on every chunk (vLLM stream_options.continuous_usage_stats) to count tokens per event."),
    click.option("--canvas-length", type=int, default=None, help="Endpoint, diffusion: canvas length (default: the catalog model's, else 256)."),
]
