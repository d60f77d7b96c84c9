"""The measuring stage's commands (`costmodel measure`, `import-bench`, `analyze`, `profile`, and fit's
measuring half): one module each, loaded by name from costmodel/cli's COMMANDS. A command here imports
no other stage; one that needs another stage after it (`fit`) is run by pipeline/cli/, which chains the two."""
