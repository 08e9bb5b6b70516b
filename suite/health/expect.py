"""Expected figures per GPU model (expectations.yaml, --expect FILE) and which results they judge."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from suite.cases import FAMILIES, family_read
from suite.errors import UserError

SHIPPED = Path(__file__).resolve().parent.parent / "expectations.yaml"
# A measurement at or above this share of its expected figure is ok. The figures are achievable
# measurements, and healthy systems of one kind published them up to ~10% apart (PCIe gen5 H2D: 51, 52 and
# 55.4 GB/s; MAMF varies 5%+ between GPUs of one node); PyTorch's copy and matmul paths may cost up to ~10%
# more than a dedicated tool. Below 80% is beyond both: a link at lower width, a throttled clock.
OK_AT_PCT = 80.0


@dataclass(frozen=True)
class Measure:
    """Which results a named measurement is taken from: rate, filters, smallest size; its families."""

    rate: str
    unit: str
    where: tuple[tuple[str, object], ...] = ()
    route: str = ""  # route kind of src -> dst results (h2d, d2h, local, peer); empty for others
    min_flops: float = 0.0
    min_bytes: float = 0.0
    per_machine: bool = False  # judged per machine and world size (a run across ranks), not per device
    families: tuple[str, ...] = ()  # the families that declare it (measures() fills this in)


def taken_from(rows, measure: Measure):
    """Which rows of a results table (with route_ and precision_ columns) `measure` takes its figure from, at
    any size: health judges only large ones (min_flops, min_bytes); a summary shows what ran."""
    mask = rows["case"].isin(measure.families)
    if measure.route:
        mask &= rows["route_"] == measure.route
    for key, wanted in measure.where:
        column = "precision_" if key == "precision" else key
        mask &= rows[column] == wanted if column in rows else False
    return mask


def measures() -> dict[str, Measure]:
    """name -> Measure, of every registered family's read module (MEASURES), in registry order; a measure
    several families declare takes the results of each."""
    out: dict[str, Measure] = {}
    for family in FAMILIES:
        for name, measure in family_read(family, "MEASURES", {}).items():
            known = out[name].families if name in out else ()
            out[name] = replace(measure, families=(*known, family))
    return out


HOST_LINKS = ("h2d", "d2h")
MODEL_KEYS = ("name", "match", "host_link")
ENTRY_KEYS = ("model", "link", "measure", "value", "source", "gpus")


@dataclass(frozen=True)
class Expected:
    """One expected figure and where it comes from."""

    measure: str
    value: float
    source: str
    model: str = ""
    link: str = ""
    gpus: int | None = None


@dataclass
class Expectations:
    """Models (name, match, host link) and expected figures, looked up by device name."""

    models: list[dict] = field(default_factory=list)
    figures: dict[tuple[str, str, int | None], Expected] = field(default_factory=dict)

    def model_of(self, device_name: str) -> dict | None:
        """The model whose `match` is the longest one found in the device name (case-insensitive)."""
        name = device_name.lower()
        found = [m for m in self.models if m["match"].lower() in name]
        return max(found, key=lambda m: len(m["match"]), default=None)

    def figure(self, device_name: str, measure: str, pcie_gen: object = None, gpus: int | None = None):
        """The Expected figure for this device and measure, or None (memoised: a fleet asks often)."""
        key = (device_name, measure, pcie_gen if isinstance(pcie_gen, int) else None, gpus)
        memo = self.__dict__.setdefault("_memo", {})
        if key not in memo:
            memo[key] = self._figure(*key)
        return memo[key]

    def _figure(self, device_name: str, measure: str, pcie_gen: object, gpus: int | None):
        model = self.model_of(device_name)
        if model is None:
            return None
        if measure in HOST_LINKS:
            link = model.get("host_link", "")
            if link.startswith("pcie") and isinstance(pcie_gen, int) and not isinstance(pcie_gen, bool):
                link = f"pcie{pcie_gen}"  # the slot's generation, where recorded, beats the model's usual one
            return self.figures.get(("link:" + link, measure, None))
        return self.figures.get(("model:" + model["name"], measure, gpus))


def _fail(where: str, problem: str) -> UserError:
    return UserError(f"{where}: {problem}; see suite/expectations.yaml for the layout")


def _unknown(where: str, what: str, entry: dict, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        names = ", ".join(map(str, unknown))
        raise _fail(where, f"{what}: unknown key(s) {names}; allowed: {', '.join(allowed)}")


def _list(where: str, data: dict, key: str) -> list:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(where, f"`{key}` is {type(value).__name__} {value!r}, not a list of entries")
    return value


def _merge(into: Expectations, data: object, where: str) -> None:
    if not isinstance(data, dict):
        raise _fail(where, "top level must be a mapping with `models` and/or `expect`")
    # gpu_check: the GPU check's own figures (suite/expectations.yaml), which health does not read.
    unknown = set(data) - {"version", "models", "expect", "gpu_check"}
    if unknown:
        names = ", ".join(sorted(map(str, unknown)))
        raise _fail(where, f"unknown key(s) {names}; allowed: version, models, expect, gpu_check")
    for i, model in enumerate(_list(where, data, "models")):
        _check_model(where, i, model)
        into.models = [m for m in into.models if m["name"] != model["name"]] + [dict(model)]
    for i, entry in enumerate(_list(where, data, "expect")):
        fig = _figure(where, i, entry, measures())
        into.figures[("model:" + fig.model if fig.model else "link:" + fig.link, fig.measure, fig.gpus)] = fig


def _check_model(where: str, i: int, model: object) -> None:
    if not isinstance(model, dict) or not all(
        isinstance(model.get(k), str) and model[k] for k in ("name", "match")
    ):
        raise _fail(where, f"models[{i}] needs a `name` and a `match` string")
    _unknown(where, f"models[{i}]", model, MODEL_KEYS)
    if not isinstance(model.get("host_link", ""), str):
        raise _fail(
            where, f"models[{i}].host_link {model['host_link']!r} is not a link name such as pcie5"
        )


def _figure(where: str, i: int, entry: object, known: dict[str, Measure]) -> Expected:
    """One `expect` entry, checked: its measure, value and source, its model or link, its GPU count."""
    if not isinstance(entry, dict):
        raise _fail(where, f"expect[{i}] is not a mapping")
    _unknown(where, f"expect[{i}]", entry, ENTRY_KEYS)
    measure = entry.get("measure")
    if measure not in known:
        raise _fail(where, f"expect[{i}].measure {measure!r} is not one of {', '.join(known)}")
    value = entry.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise _fail(where, f"expect[{i}].value {value!r} is not a positive number")
    if not isinstance(entry.get("source"), str) or not entry["source"].strip():
        raise _fail(where, f"expect[{i}] has no `source`: every expected figure says where it comes from")
    model, link = _model_or_link(where, i, entry, measure)
    gpus = _gpus(where, i, entry.get("gpus"), measure, known)
    return Expected(measure, float(value), entry["source"].strip(), model, link, gpus)


def _model_or_link(where: str, i: int, entry: dict, measure: str) -> tuple[str, str]:
    """What an `expect` entry's figure is for: a GPU model, or (host copies only) a link."""
    model, link = entry.get("model"), entry.get("link")
    if bool(model) == bool(link) or not isinstance(model or link, str):
        raise _fail(where, f"expect[{i}] needs exactly one of `model` or `link`, a name")
    if link and measure not in HOST_LINKS:
        raise _fail(where, f"expect[{i}]: `link` figures are for {' and '.join(HOST_LINKS)} only")
    return model or "", link or ""


def _gpus(where: str, i: int, gpus: object, measure: str, known: dict[str, Measure]) -> int | None:
    """The GPU count a per-machine measure's figure needs, and no other figure has."""
    if known[measure].per_machine != (gpus is not None):
        per_machine = ", ".join(n for n, m in known.items() if m.per_machine)
        raise _fail(
            where,
            f"expect[{i}]: `gpus` is required for {measure}"
            if known[measure].per_machine
            else f"expect[{i}]: `gpus` only applies to {per_machine}",
        )
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise _fail(where, f"expect[{i}].gpus {gpus!r} is not a GPU count (a whole number, e.g. 8)")
    return gpus


def load_expectations(extra: list[str] | None = None) -> Expectations:
    """The shipped table, then each --expect FILE on top; a bad file is a one-line UserError."""
    expectations = Expectations()
    for path in [str(SHIPPED), *(extra or [])]:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise UserError(f"--expect {path}: cannot read ({exc.strerror}); pass a YAML file") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark else ""
            raise UserError(f"--expect {path}: not valid YAML{at}; fix the file") from None
        _merge(expectations, data, path)
    known = {m["name"] for m in expectations.models}
    for (key, measure, _), fig in expectations.figures.items():
        if fig.model and fig.model not in known:
            raise UserError(f"expectations: {measure} figure for model {fig.model!r}, which no `models` entry "
                            "names; add it under models with a `match`")
    return expectations
