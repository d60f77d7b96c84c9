"""The simulating stage's commands (`costmodel simulate`, `plan`, `sweep`, `compare-bench`) and the tables
`validate` prints: one module each, loaded by name from costmodel/cli's COMMANDS. A command here imports no
other stage; `validate`, which records with measure before it scores, is pipeline/cli/validate.py."""
