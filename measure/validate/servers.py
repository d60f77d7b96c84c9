"""Model-facing servers of the validation load run: each serves one static batch with the real
transformers `generate` (the same models `costmodel measure` builds) and reports, per request,
when its first output and its last token were ready, from CUDA events recorded in the loop.

- diffusion: `DiffusionGemmaForBlockDiffusion.generate` instrumented by the harness's
  `DiffusionInstrument` with the request's replayed steps per canvas (random weights never
  converge on their own); a canvas is out when the batch's denoising loop for it ends.
- ar: `generate` (greedy); a stopping-criteria probe marks the time every token is appended.
- mtp: `generate(assistant_model=...)` with a constant k draft tokens per iteration; the probe
  marks each verify iteration and the number of tokens it added (1 + accepted drafts).
Prompts are random token ids, every row padded to the batch's longest prompt (as a batched
server pads); outputs are forced to their length (EOS ignored) so the workload is what was planned.
"""

from __future__ import annotations

import math

from measure.harness.hook import DiffusionInstrument
from measure.harness.timing import PassTimer
from costmodel.schemas.batch_request import BatchRequest


class _TokenProbe:
    """A StoppingCriteria that never stops: it records a timing mark and the length per call."""

    def __init__(self, timer: PassTimer):
        self.timer = timer
        self.marks: list = []
        self.lengths: list[int] = []

    def __call__(self, input_ids, scores, **kwargs):
        import torch  # optional heavy dependency (the measure extra)

        self.marks.append(self.timer.mark())
        self.lengths.append(int(input_ids.shape[1]))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _prompt_ids(batch: list[BatchRequest], vocab: int, device, seed: int):
    import torch  # optional heavy dependency (the measure extra)

    g = torch.Generator(device="cpu").manual_seed(seed)
    P = max(r.prompt_tokens for r in batch)
    return torch.randint(10, vocab - 1, (len(batch), P), generator=g).to(device)


class DiffusionServer:
    def __init__(self, model, device, max_denoising_steps: int = 48, seed: int = 0):
        self.model = model
        self.timer = PassTimer(device)
        self.device = device
        self.max_steps = max_denoising_steps
        self.instr = DiffusionInstrument(model, self.timer, record_commits=False)
        self.seed = seed

    def serve(self, batch: list[BatchRequest]):
        import torch  # optional heavy dependency (the measure extra)

        C = self.model.config.canvas_length
        blocks = [max(1, math.ceil(r.output_tokens / C)) for r in batch]
        n_blocks = max(blocks)
        replay = [[min(self.max_steps, int(r.steps_per_canvas[min(c, len(r.steps_per_canvas) - 1)])) for c in range(n_blocks)] for r in batch]
        ids = _prompt_ids(batch, self.model.config.text_config.vocab_size, self.device, self.seed)
        self.seed += 1
        with self.instr:
            self.instr.start(len(batch), ids.shape[1], replay)
            start = self.timer.mark()
            with torch.no_grad():
                out = self.model.generate(ids, max_new_tokens=C * n_blocks, max_denoising_steps=self.max_steps,
                                          eos_token_id=None, disable_compile=True)
            seqs = out.sequences if hasattr(out, "sequences") else out
            self.instr.collect(seqs, [], [])
            steps = list(self.instr.steps)
        canvas_end = {}
        for s in steps:
            canvas_end[s.canvas] = self.timer.ms(start, s.end)[0] / 1e3
        first = [canvas_end[0]] * len(batch)
        finish = [canvas_end[b - 1] for b in blocks]
        return first, finish, {}


class ARServer:
    """AR (assistant=None) or MTP (assistant given, batches of one)."""

    def __init__(self, model, device, assistant=None, draft_tokens: int = 4, seed: int = 0):
        self.model = model
        self.assistant = assistant
        self.timer = PassTimer(device)
        self.device = device
        self.k = draft_tokens
        self.seed = seed
        if assistant is not None:
            assistant.generation_config.num_assistant_tokens = draft_tokens
            assistant.generation_config.num_assistant_tokens_schedule = "constant"

    def serve(self, batch: list[BatchRequest]):
        import torch  # optional heavy dependency (the measure extra)
        from transformers import StoppingCriteriaList  # optional heavy dependency (the measure extra)

        ids = _prompt_ids(batch, self.model.config.vocab_size, self.device, self.seed)
        self.seed += 1
        P = ids.shape[1]
        longest = max(r.output_tokens for r in batch)
        probe = _TokenProbe(self.timer)
        kw = dict(max_new_tokens=longest, min_new_tokens=longest, do_sample=False, stopping_criteria=StoppingCriteriaList([probe]))
        if self.assistant is not None:
            kw["assistant_model"] = self.assistant
        start = self.timer.mark()
        with torch.no_grad():
            self.model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        self.timer.sync()
        t = [self.timer.ms(start, m)[0] / 1e3 for m in probe.marks]
        new = [n - P for n in probe.lengths]  # tokens generated when each mark was taken
        first = [t[0]] * len(batch)
        finish = [t[next(i for i, n in enumerate(new) if n >= r.output_tokens)] if new[-1] >= r.output_tokens else t[-1] for r in batch]
        extras = {}
        if self.assistant is not None:
            added = [new[0]] + [b - a for a, b in zip(new, new[1:])]
            extras["accepted_per_iteration"] = {batch[0].request_id: [max(0, a - 1) for a in added[1:]]}
        return first, finish, extras
