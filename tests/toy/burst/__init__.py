"""A toy fourth serving mode with its own pass kind, profile part and per-request state: "burst"
decoding (mode.py, the vocabulary part: what would be costmodel/modes/burst.py) and its engine
(engine.py: what would be simulate/engines/burst.py). tests/test_recipe_mode.py registers them."""
