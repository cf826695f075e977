"""What a dashboard user uploads, read and checked before the planner sees it: a model's config.json, a deployment
fit, acceptance files (any format the planner reads, a vLLM bench JSON, a /metrics dump) and measured rows, each
bounded in size, parsed with one clear refusal naming the file, and stored under the server's upload folder."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd

from calibration.measured import read_measured
from dashboard.server_files import safe_name, store_upload
from dashboard.state import MAX_RATE
from simulator.errors import PlannerError
from simulator.files import json_failure_reason
from simulator.specs.acceptance_files import AcceptanceFile, parse_acceptance_bytes
from simulator.specs.deployment_fit import DEPLOYMENT_FORMAT, load_deployment_fit
from simulator.specs.models import model_from_hf_config

MAX_UPLOAD_BYTES = 50_000_000  # a config.json is ~2 kB, a bench JSON or /metrics dump well under 10 MB


def _check_upload(data, filename: str, allow_empty: bool = False) -> None:
    if not isinstance(data, (bytes, bytearray)):
        raise PlannerError(f"{filename}: expected the uploaded file's bytes")
    if not data and not allow_empty:
        raise PlannerError(f"{filename}: the file is empty")
    if len(data) > MAX_UPLOAD_BYTES:
        raise PlannerError(f"{filename}: {len(data) / 1e6:.0f} MB is too large for this upload"
                           f" (at most {MAX_UPLOAD_BYTES / 1e6:.0f} MB)")


def _json_object(data: bytes, filename: str) -> dict:
    _check_upload(data, filename)
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise PlannerError(f"{filename}: not a text file") from None
    except RecursionError:
        raise PlannerError(f"{filename}: JSON nested too deeply") from None
    except ValueError as err:  # a JSONDecodeError, or an integer of over 4300 digits
        raise PlannerError(f"{filename}: not valid JSON ({json_failure_reason(err)})") from None
    if not isinstance(obj, dict):
        raise PlannerError(f"{filename}: expected a JSON object at the top level")
    return obj


def uploaded_model(data: bytes, filename: str) -> str:
    """Validate an uploaded Hugging Face config.json and store it where ``load_model`` can read it.

    Returns the path to pass as the scenario's model name. Adapter: build_scenario takes a model
    name or a file path, not a config dict, so the upload is written to a fresh file of this process's
    private directory (dashboard/server_files.py), in a folder named after the model.
    """
    cfg = _json_object(data, filename)
    stem = safe_name(str(cfg.get("_name_or_path") or "") or Path(filename).stem, "uploaded")
    model_from_hf_config(cfg, name=stem, origin=filename)  # raises PlannerError with the reason
    return str(store_upload(bytes(data), stem, "config.json"))


def uploaded_deployment_fit(data: bytes, filename: str):
    """Validate an uploaded ``calibration.fit_deployment`` file and store it where the scenario reads it:
    (path, the loaded DeploymentFit). Whether it was fitted for this scenario's deployment is checked when
    the scenario is built (DeploymentMismatch)."""
    stem = safe_name(Path(filename).name, "fit.json")
    doc = _json_object(data, stem)
    if doc.get("format") == DEPLOYMENT_FORMAT:  # else the reader names what the file is not
        check_fit_figures(doc, stem)
    path = store_upload(bytes(data), stem)
    try:
        fit = load_deployment_fit(path)
    except PlannerError as err:  # name the upload, not the stored copy
        raise PlannerError(str(err).replace(str(path), stem)) from None
    return str(path), fit


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_fit_figures(doc: dict, name: str) -> None:
    """What a hand-edited fit may get wrong that would print false precision or stop the page: the band
    (uncertainty.step_time_rel / goodput_rel, > 0 in every file fit_deployment writes: it adds a noise
    floor), each term inside its interval [lo, hi], the provenance a table (issue 50)."""
    refit = "; refit it with python -m calibration.fit_deployment"
    unc = doc.get("uncertainty")
    for key in ("step_time_rel", "goodput_rel"):
        value = unc.get(key) if isinstance(unc, dict) else None
        if not _finite(value) or not 0 < value <= 10:
            raise PlannerError(f"{name}: uncertainty.{key} is {value!r}, not a share above 0 (e.g. 0.05): the"
                               f" predictions would claim a +-0% band{refit}")
    terms = doc.get("terms")
    for term, entry in (terms.items() if isinstance(terms, dict) else ()):
        iv = entry.get("interval") if isinstance(entry, dict) else None
        value = entry.get("value") if isinstance(entry, dict) else None
        if (isinstance(iv, list) and len(iv) == 2 and all(map(_finite, iv)) and _finite(value)
                and not iv[0] <= value <= iv[1]):
            raise PlannerError(f"{name}: terms.{term}.interval {iv} does not hold its value {value:g}"
                               f" (an interval is [low, high] around the value){refit}")
    if doc.get("provenance") is not None and not isinstance(doc["provenance"], dict):
        raise PlannerError(f"{name}: provenance must be a table, got {type(doc['provenance']).__name__}{refit}")


def _clean_rates(rates: list, filename: str) -> list[float]:
    """Conditional rates up to the first position nobody reached; a rate of exactly 1 (every draft at
    that position accepted) is held at MAX_RATE, since a rate of 1 would accept forever. Rates above 1
    are refused by the readers (calibration.vllm_io), never clipped here."""
    out = []
    for r in rates:
        if r is None or not isinstance(r, (int, float)) or not math.isfinite(r) or r < 0:
            break  # a position nobody reached: stop there
        if r > 1 + 1e-6:
            raise PlannerError(f"{filename}: conditional acceptance rate {r:.4g} at position {len(out)} is above 1;"
                               " the file is not a consistent vLLM record")
        out.append(min(float(r), MAX_RATE))
    if not out:
        raise PlannerError(f"{filename}: no usable per-position acceptance rates")
    return out


def acceptance_file(data: bytes, filename: str) -> AcceptanceFile:
    """Any acceptance file the planner reads (simulator.specs.acceptance_files), recognised by content:
    speculation_profile.json, vLLM bench JSON, per-request metrics, /metrics, measured-rows CSV."""
    _check_upload(data, filename)
    return parse_acceptance_bytes(bytes(data), filename)


def _expect_kind(got: AcceptanceFile, filename: str, kind: str) -> AcceptanceFile:
    """The file when it is of ``kind``, its rates cut at the first position nobody reached."""
    if not got.kind.startswith(kind):
        raise PlannerError(f"{filename}: this is a {got.kind}, not a {kind}; choose 'acceptance file (any format)'")
    return dataclasses.replace(got, conditional=tuple(_clean_rates(list(got.conditional), filename)))


def acceptance_from_bench_json(data: bytes, filename: str) -> AcceptanceFile:
    """Conditional per-position acceptance from `vllm bench serve --save-result` JSON."""
    obj = _json_object(data, filename)
    if "spec_decode_per_position_acceptance_rates" not in obj:
        raise PlannerError(f"{filename}: no 'spec_decode_per_position_acceptance_rates' field; was the server running"
                           " speculative decoding (and vLLM new enough to record it)?")
    return _expect_kind(acceptance_file(data, filename), filename, "vllm bench serve")


def acceptance_from_metrics(data: bytes, filename: str) -> AcceptanceFile:
    """Conditional per-position acceptance from a Prometheus /metrics scrape of a vLLM server."""
    return _expect_kind(acceptance_file(data, filename), filename, "Prometheus")


# --- validation against measured runs -----------------------------------------------------------

def fit_from_measured(sc, data: bytes, filename: str) -> tuple[str, bytes, str, list[str]]:
    """``calibration.fit_deployment`` on an uploaded measured-runs CSV for the scenario ``sc`` (its own step
    times, without any fit it carries): (the fit file's name, its bytes, the command's report, its caveats), each
    refusal and caveat naming the uploaded file where the command names its --measured flag."""
    import warnings

    from calibration.fit_deployment import check_rows, fit, with_subject
    from calibration.fit_deployment_file import document, report
    from simulator.errors import PlannerWarning

    rows = read_measured_csv(data, filename).assign(file=filename)
    try:
        check_rows(rows, sc)
    except PlannerError as err:  # the command's flag is this upload here
        raise PlannerError(with_subject(str(err), filename)) from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PlannerWarning)
        doc = document(sc, fit(sc, rows), [filename])
    caveats = [with_subject(str(w.message), filename) for w in caught if issubclass(w.category, PlannerWarning)]
    name = f"fit-{Path(filename).stem or 'measured'}.json"
    return name, (json.dumps(doc, indent=1) + "\n").encode(), report(doc), caveats


def read_measured_csv(data: bytes, filename: str) -> pd.DataFrame:
    """An uploaded measured-runs CSV (the schema `calibration.validate` reads)."""
    _check_upload(data, filename, allow_empty=True)  # the reader names what an empty CSV lacks
    return read_measured(bytes(data), filename)
