"""The measuring stage's commands (`costmodel measure`, `import-bench`, `analyze`, `fit`, `profile`):
one module each, loaded by name from costmodel/cli's COMMANDS. A command here reaches another stage
only through a named step (costmodel/cli/steps.py), never by importing it."""
