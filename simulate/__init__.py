"""Discrete-event (SimPy) serving simulator for DiffusionGemma (diffusion), AR and MTP modes."""
