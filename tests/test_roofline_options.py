"""`costmodel roofline`: --sweep and --batch both give the batches, so giving both is refused, never one ignored."""

from costmodel.cli import main

ARGS = ["roofline", "--model", "diffusiongemma-26b-a4b", "--hardware", "h200"]


def test_sweep_and_a_batch_list_are_refused_together(capsys):
    assert main([*ARGS, "--sweep", "--batch", "1,2"]) == 2
    assert "give one of --sweep and --batch" in capsys.readouterr().err


def test_sweep_alone_sweeps(capsys):
    assert main([*ARGS, "--sweep"]) in (0, None)
    assert "256" in capsys.readouterr().out
