"""GPU catalog (costmodel/data/hardware.json, a source per number), user-described GPUs, and
detection of the local GPU through pynvml."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path

from costmodel.errors import UserError
from costmodel.fields import HARDWARE_FIELDS
from costmodel.jsonfile import read_json
from costmodel.precision import Precision

REQUIRED = ("name", "memory_gb", "memory_bandwidth_tbps", "tflops", "board_power_w", "price_usd_per_gpu_hour")
ARCH_FIELDS = ("compute_capability", "precisions", "cudagraph_max_tokens", "large_batch_defaults_min_gib")
# A GPU described without an architecture (older user files, profiles written before the field)
# gets this one's engine defaults, and the settings say so (costmodel/memory.py).
ASSUMED_ARCHITECTURE = "hopper"


@dataclass(frozen=True)
class Architecture:
    """What the memory model and the engine defaults need of a GPU architecture:
    data, so a new GPU is one catalog entry and never a name test in code."""

    name: str
    compute_capability: str
    precisions: tuple[str, ...]  # weight formats its kernels run (costmodel/precision.py)
    cudagraph_max_tokens: int  # vLLM's largest CUDA-graph capture size
    large_batch_defaults_min_gib: float | None  # vLLM's large batch defaults from this device memory (None: never)
    sources: dict = field(default_factory=dict)

    def check_precision(self, precision: str, gpu: str) -> None:
        if precision not in self.precisions:
            raise UserError(f"{gpu} ({self.name}) cannot run precision {precision!r}", f"use one of {', '.join(self.precisions)}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["precisions"] = list(self.precisions)
        return d


def validate_architecture(name: str, d: dict, where: str) -> Architecture:
    if not isinstance(d, dict) or any(k not in d for k in ARCH_FIELDS):
        raise UserError(f"architecture {name!r} in {where} lacks some of {', '.join(ARCH_FIELDS)}",
                        "copy the architecture object of `costmodel hardware --template`")
    try:
        lb = d["large_batch_defaults_min_gib"]
        return Architecture(name, str(d["compute_capability"]), tuple(str(p) for p in d["precisions"]), int(d["cudagraph_max_tokens"]),
                            None if lb is None else float(lb), dict(d.get("sources", {})))
    except (TypeError, ValueError) as e:
        raise UserError(f"architecture {name!r} in {where} has a bad value ({e})", "see `costmodel hardware --template`") from None


def architectures() -> dict[str, Architecture]:
    """The catalog's architectures (hardware.json "architectures")."""
    doc = _catalog_doc().get("architectures", {})
    return {k: validate_architecture(k, v, "the built-in catalog") for k, v in doc.items() if not k.startswith("_")}


def _architecture_of(v, hid: str, where: str) -> Architecture | None:
    """A GPU entry's "architecture": a catalog architecture's name, or an object of its own (with "name")."""
    if v is None:
        return None
    if isinstance(v, dict):
        return validate_architecture(str(v.get("name", hid)), v, where)
    known = architectures()
    if v not in known:
        raise UserError(f"hardware entry {hid!r} in {where} names unknown architecture {v!r}",
                        f"use one of {', '.join(sorted(known))}, or give an architecture object (see `costmodel hardware --template`)")
    return known[v]


@dataclass(frozen=True)
class HardwareSpec:
    id: str
    name: str
    memory_gb: float
    memory_bandwidth_tbps: float
    tflops: dict  # dense tensor TFLOP/s per compute format ("bf16", "fp8", "fp4")
    board_power_w: float
    price_usd_per_gpu_hour: float
    purchase_usd: float | None = None
    nvml_names: tuple[str, ...] = ()
    l2_mb: float | None = None
    sms: int | None = None
    measured_memory_bandwidth_tbps: float | None = None
    measured_tflops: dict = field(default_factory=dict)
    measured_memory_gib: float | None = None  # the device memory torch (and so vLLM's utilisation) sees, where measured
    sources: dict = field(default_factory=dict)
    architecture: Architecture | None = None

    @property
    def device_bytes(self) -> int:
        """The memory gpu_memory_utilization is a share of: measured where it was, else the vendor figure in GB."""
        return int(self.measured_memory_gib * 2**30) if self.measured_memory_gib else int(self.memory_gb * 1e9)

    @property
    def arch(self) -> Architecture:
        """This GPU's architecture; one described without it (or a profile written before the
        field) takes its catalog entry's, else ASSUMED_ARCHITECTURE's (`arch_assumed` says so)."""
        if self.architecture is not None:
            return self.architecture
        entry = catalog().get(self.id)
        if entry is not None and entry.architecture is not None:
            return entry.architecture
        return architectures()[ASSUMED_ARCHITECTURE]

    @property
    def arch_assumed(self) -> bool:
        entry = catalog().get(self.id)
        return self.architecture is None and (entry is None or entry.architecture is None)

    def peak_tflops(self, precision: Precision) -> float:
        try:
            return float(self.tflops[precision.compute])
        except KeyError:
            raise UserError(
                f"{self.id} has no {precision.compute} tensor rate, so precision {precision.name!r} cannot run on it",
                f"use one of the precisions whose format it lists: {', '.join(self.tflops)}",
            ) from None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["nvml_names"] = list(self.nvml_names)
        a = self.architecture
        if a is None:
            d.pop("architecture")
        else:  # a catalog architecture by name, a user's own in full
            d["architecture"] = a.name if architectures().get(a.name) == a else a.to_dict()
        return d


def validate_spec(hid: str, d: dict, where: str) -> HardwareSpec:
    """A HardwareSpec from a catalog-style dict, every required field checked (one-line errors)."""
    if not isinstance(d, dict):
        raise UserError(f"hardware entry {hid!r} in {where} is not an object", "describe it with the fields of costmodel/data/hardware.json")
    unknown = sorted(set(d) - {f.name for f in fields(HardwareSpec)} - READ_ELSEWHERE)
    if unknown:  # a typo (memory_GB) must not leave the field it meant at another value silently
        raise UserError(f"hardware entry {hid!r} in {where} has unknown field(s) {', '.join(map(str, unknown))}",
                        f"fields are {', '.join(f.name for f in fields(HardwareSpec))} (see `costmodel hardware --template`)")
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise UserError(f"hardware entry {hid!r} in {where} lacks {', '.join(missing)}", "add them (see costmodel/data/hardware.json for the fields)")
    try:
        spec = HardwareSpec(
            id=hid,
            name=str(d["name"]),
            memory_gb=float(d["memory_gb"]),
            memory_bandwidth_tbps=float(d["memory_bandwidth_tbps"]),
            tflops={str(k): float(v) for k, v in d["tflops"].items()},
            board_power_w=float(d["board_power_w"]),
            price_usd_per_gpu_hour=float(d["price_usd_per_gpu_hour"]),
            purchase_usd=float(d["purchase_usd"]) if d.get("purchase_usd") is not None else None,
            nvml_names=tuple(d.get("nvml_names", ())),
            l2_mb=d.get("l2_mb"),
            sms=d.get("sms"),
            measured_memory_bandwidth_tbps=d.get("measured_memory_bandwidth_tbps"),
            measured_tflops=dict(d.get("measured_tflops", {})),
            measured_memory_gib=float(d["measured_memory_gib"]) if d.get("measured_memory_gib") is not None else None,
            sources=dict(d.get("sources", {})),
            architecture=_architecture_of(d.get("architecture"), hid, where),
        )
    except (TypeError, ValueError, AttributeError) as e:
        raise UserError(f"hardware entry {hid!r} in {where} has a bad value ({e})", "numbers must be numbers; tflops maps a format to TFLOP/s") from None
    _check_finite(spec, hid, where)
    for name, fld in HARDWARE_FIELDS.items():  # the table's ranges (costmodel/inputs.py declares these), one check for every reader of an entry
        v = getattr(spec, name, None)
        for key, x in (v.items() if isinstance(v, dict) else [("", v)] if v is not None else []):
            fld.named(f"{name}.{key}" if key else name).check(x, f"hardware entry {hid!r} in {where}")
    if spec.memory_gb <= 0 or spec.memory_bandwidth_tbps <= 0 or not spec.tflops or min(spec.tflops.values()) <= 0:
        raise UserError(f"hardware entry {hid!r} in {where} has a non-positive memory, bandwidth or TFLOP/s", "give positive datasheet values")
    if spec.price_usd_per_gpu_hour < 0:
        raise UserError(f"hardware entry {hid!r} in {where} has a negative price", "give a price >= 0")
    return spec


# fields of an entry that other readers take (costmodel/costing/terms.py: a GPU's pricing terms)
READ_ELSEWHERE = {"pricing_terms"}
# Every number of a hardware entry, in its field's unit, lies in this range (or is 0 where 0 is allowed)
PLAUSIBLE = (1e-6, 1e12)


def _check_finite(spec: HardwareSpec, hid: str, where: str) -> None:
    """Every number of an entry finite (a NaN bandwidth would price every pass NaN, an infinite one
    would make every pass compute-bound) and the measured ones positive; optional ones may be absent."""
    numbers = {"memory_gb": spec.memory_gb, "memory_bandwidth_tbps": spec.memory_bandwidth_tbps, "board_power_w": spec.board_power_w,
               "price_usd_per_gpu_hour": spec.price_usd_per_gpu_hour, "purchase_usd": spec.purchase_usd, "l2_mb": spec.l2_mb, "sms": spec.sms,
               "measured_memory_bandwidth_tbps": spec.measured_memory_bandwidth_tbps,
               **{f"tflops.{k}": v for k, v in spec.tflops.items()}, **{f"measured_tflops.{k}": v for k, v in spec.measured_tflops.items()}}
    for name, v in numbers.items():
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise UserError(f"hardware entry {hid!r} in {where}: {name} is {v!r}, not a finite number", "give the datasheet value")
        if v > 0 and not PLAUSIBLE[0] <= v <= PLAUSIBLE[1]:  # a unit slip (3.35e-9): every time it prices would over- or underflow
            raise UserError(f"hardware entry {hid!r} in {where}: {name} is {v!r}, outside [{PLAUSIBLE[0]:g}, {PLAUSIBLE[1]:g}] in its unit",
                            "give the datasheet value in the field's unit (GB, TB/s, TFLOP/s, W, USD)")
        if name in ("memory_gb", "memory_bandwidth_tbps", "price_usd_per_gpu_hour") or name.startswith("tflops."):
            continue  # their signs: the checks below
        if v < 0 or (v == 0 and name != "purchase_usd"):
            raise UserError(f"hardware entry {hid!r} in {where}: {name} is {v!r}, not positive", "give the datasheet value")


@lru_cache(maxsize=1)
def _catalog_doc() -> dict:
    # beside this module, as the package installs it (importlib.resources finds the same file for ~15 ms of every start-up)
    return json.loads(Path(__file__).with_name("data").joinpath("hardware.json").read_text())


def catalog() -> dict[str, HardwareSpec]:
    return dict(_validated_catalog())


@lru_cache(maxsize=1)
def _validated_catalog() -> dict[str, HardwareSpec]:
    """Checked once per process, as the document is read once (a one-request simulate asked for it 6 times)."""
    return {hid: validate_spec(hid, d, "the built-in catalog") for hid, d in _catalog_doc()["gpus"].items()}


def default_hardware(purpose: str = "") -> str:
    """The catalog's default GPU (hardware.json "default_gpu"): the one a command uses when none is
    named, so no code spells a GPU id out; `purpose` "memory": the memory command's own default
    ("memory_default_gpu")."""
    key = f"{purpose}_default_gpu" if purpose else "default_gpu"
    hid = _catalog_doc()[key]
    if hid not in _catalog_doc()["gpus"]:
        raise UserError(f"costmodel/data/hardware.json: {key} {hid!r} is not a catalog GPU", "name one of its gpus")
    return hid


def source_text(key: str) -> str:
    return _catalog_doc()["sources"].get(key, key)


def load_user_hardware(path: str | Path) -> dict[str, HardwareSpec]:
    """A JSON file describing GPUs the catalog lacks: {"gpus": {"my-gpu": {...same fields...}}}
    or a single entry {"id": "my-gpu", ...}."""
    doc = read_json(path, "hardware file")
    if isinstance(doc, dict) and "gpus" in doc and isinstance(doc["gpus"], dict):
        return _not_redefining({hid: validate_spec(hid, d, str(path)) for hid, d in doc["gpus"].items()}, path)
    if isinstance(doc, dict) and "id" in doc:
        return _not_redefining({doc["id"]: validate_spec(doc["id"], doc, str(path))}, path)
    raise UserError(f"hardware file {path} has neither a 'gpus' object nor an 'id'", 'write {"gpus": {"my-gpu": {...}}} with the catalog\'s fields')


def _not_redefining(specs: dict[str, HardwareSpec], path) -> dict[str, HardwareSpec]:
    """A user file may repeat a catalog GPU as it is, never redefine it silently: every result
    naming that id would then describe another GPU than the catalog's."""
    known = catalog()
    for hid, spec in specs.items():
        if hid in known and spec != known[hid]:
            diff = [f.name for f in fields(spec) if getattr(spec, f.name) != getattr(known[hid], f.name)]
            raise UserError(f"hardware file {path} redefines the catalog GPU {hid!r} ({', '.join(diff[:4]) or 'other numbers'} differ)",
                            f"give it an id of its own (e.g. \"{hid}-custom\") and pass --hardware {hid}-custom")
    return specs


def get_hardware(name: str, user_file: str | Path | None = None) -> HardwareSpec:
    """A catalog id (h100-sxm, h100-pcie, h200, rtx-5090), an id from `user_file`, or a path to a
    user hardware JSON file holding exactly one GPU."""
    known = catalog()
    if user_file:
        known.update(load_user_hardware(user_file))
    if name in known:
        return known[name]
    p = Path(name)
    if p.suffix == ".json":
        user = load_user_hardware(p)
        if len(user) == 1:
            return next(iter(user.values()))
        raise UserError(f"hardware file {p} describes {len(user)} GPUs", "pass --hardware ID together with --hardware-file FILE")
    raise UserError(f"unknown hardware {name!r}", f"use one of {', '.join(sorted(known))}, or describe it in a JSON file (see `costmodel hardware --template`)")


def match_nvml_name(nvml_name: str, extra: dict[str, HardwareSpec] | None = None) -> HardwareSpec | None:
    """Map a GPU name as NVML reports it to a catalog entry, or one of `extra` (a user file's), by
    exact alias first, then prefix."""
    specs = {**catalog(), **(extra or {})}
    for s in specs.values():
        if nvml_name in s.nvml_names:
            return s
    best = None
    for s in specs.values():
        for alias in s.nvml_names:
            if nvml_name.startswith(alias) and (best is None or len(alias) > best[0]):
                best = (len(alias), s)
    return best[1] if best else None


def detect_local(index: int = 0) -> tuple[str, HardwareSpec | None]:
    """(NVML name, catalog entry or None). Raises UserError when no NVIDIA GPU/driver is present."""
    try:
        import pynvml
    except ImportError:
        raise UserError("pynvml is not installed, so the local GPU cannot be detected", "pip install 'costmodel[measure]' or pass --hardware") from None
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
    except Exception as e:  # pynvml raises NVMLError subclasses
        raise UserError(f"no NVIDIA GPU found through NVML ({e})", "run on a GPU machine or pass --hardware") from None
    name = name.decode() if isinstance(name, bytes) else str(name)
    return name, match_nvml_name(name)


def template() -> dict:
    """A complete catalog entry for a GPU the catalog lacks (`costmodel hardware --template`): every
    field the catalog reads, its architecture written out as an object (a catalog architecture's
    name, e.g. "hopper", also works)."""
    arch = architectures()["ada"].to_dict()
    arch.update(name="ada")
    doc = json.loads(json.dumps(TEMPLATE))
    doc["gpus"]["my-gpu"]["architecture"] = arch
    return doc


def resolve_local(nvml_name: str, hardware: str | None = None, hardware_file: str | Path | None = None) -> HardwareSpec:
    """The catalog (or user file) entry of the local GPU named `nvml_name`: `hardware` when given,
    else matched by its NVML name; one that no entry describes is a one-line error naming the template."""
    if hardware:
        return get_hardware(hardware, hardware_file)
    spec = match_nvml_name(nvml_name, load_user_hardware(hardware_file) if hardware_file else None)
    if spec is None:
        raise UserError(f"local GPU {nvml_name!r} is not in the GPU catalog",
                        "describe it: costmodel hardware --template > my-gpu.json, fill it in, pass --hardware-file my-gpu.json")
    return spec


TEMPLATE = {
    "gpus": {
        "my-gpu": {
            "name": "Vendor Model 48GB",
            "nvml_names": ["Vendor Model"],
            "memory_gb": 48,
            "memory_bandwidth_tbps": 0.96,
            "tflops": {"bf16": 181, "fp8": 362},
            "board_power_w": 300,
            "price_usd_per_gpu_hour": 1.0,
            "purchase_usd": 7000,
            "l2_mb": 96,
            "sms": 142,
            "sources": {"memory_gb": "datasheet URL", "memory_bandwidth_tbps": "datasheet URL", "tflops.bf16": "datasheet URL",
                        "tflops.fp8": "datasheet URL", "board_power_w": "datasheet URL", "price_usd_per_gpu_hour": "your contract",
                        "purchase_usd": "your quote"},
        }
    }
}
