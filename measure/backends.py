"""`costmodel measure`'s one entry point: the in-process GPU harness (measure/harness), or with
--endpoint URL the load generator for a live OpenAI-compatible server (measure/endpoint). An option
of one backend given to the other is refused, never silently ignored."""

from __future__ import annotations

from dataclasses import dataclass, field

from measure.endpoint.loadtest import LoadTestOptions, reject_endpoint_options, reject_harness_options, run_loadtest
from measure.harness.campaign import run_harness
from measure.harness.config import HarnessOptions


@dataclass
class MeasureOptions:
    """Both backends' options as given; `given` names those given explicitly (parameter name -> flag)."""

    harness: HarnessOptions
    endpoint: LoadTestOptions
    given: dict[str, str] = field(default_factory=dict)


def run_measure(opts: MeasureOptions) -> int:
    if opts.endpoint.endpoint:
        reject_harness_options(opts.given)
        return run_loadtest(opts.endpoint)
    reject_endpoint_options(opts.given)  # e.g. --qps without --endpoint
    return run_harness(opts.harness)
