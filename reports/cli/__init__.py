"""The reporting stage's command (`costmodel report`), loaded by name from costmodel/cli's COMMANDS."""
