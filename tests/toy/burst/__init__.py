"""A toy fourth serving mode with its own pass kind, profile part and per-request state: "burst"
decoding. mode.py is costmodel/modes/burst.py as the recipe adds it, engine.py
simulate/engines/burst.py; its pass kind is an entry tests/test_recipe_mode.py adds to PASS_KINDS."""
