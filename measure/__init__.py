"""`costmodel measure` and `costmodel import-bench`: the first stage. It times passes and records
commit behaviour on a GPU (harness/: transformers' own models), load-tests a live OpenAI-compatible
endpoint (endpoint/), profiles single operators (ops/), and writes run directories through
costmodel/schemas/rundir.py."""
