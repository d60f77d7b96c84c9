"""The simulating stage's commands (`costmodel simulate`, `plan`, `sweep`, `compare-bench`,
`validate`): one module each, loaded by name from costmodel/cli's COMMANDS. A command here reaches
another stage only through a named step (costmodel/cli/steps.py), never by importing it."""
