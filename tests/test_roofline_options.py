"""`costmodel roofline`: --sweep and --batch both give the batches, so giving both is refused, never one ignored."""

from click.testing import CliRunner

from costmodel.cli import cli


def test_sweep_and_a_batch_list_are_refused_together():
    res = CliRunner().invoke(cli, ["roofline", "--sweep", "--batch", "1,2", "--model", "diffusiongemma-26b-a4b", "--hardware", "h200"])
    assert res.exit_code == 2 and "give one of --sweep and --batch" in res.output


def test_sweep_alone_sweeps():
    res = CliRunner().invoke(cli, ["roofline", "--sweep", "--model", "diffusiongemma-26b-a4b", "--hardware", "h200"])
    assert res.exit_code == 0, res.output
