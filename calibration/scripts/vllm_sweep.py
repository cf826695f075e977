#!/usr/bin/env python3
"""Measure (batch size, K) on a GPU host with vLLM, into the engine-run CSV schema.

For each K: start `vllm serve MODEL --speculative-config '{"method": ..., "num_speculative_tokens": K, ...}'`
(no spec config for K = 0), wait for /health; for each batch size B: scrape /metrics, run
`vllm bench serve --max-concurrency B --save-result --result-filename ...`, scrape /metrics again,
convert with calibration.vllm_io (acceptance from the JSON's spec_decode_* fields, else from the
/metrics difference). Rows are appended to --output as each point finishes; existing points are skipped.

Example:
  python calibration/scripts/vllm_sweep.py --model meta-llama/Llama-3.1-8B-Instruct \
      --method eagle3 --draft-model yuhuili/EAGLE3-LLaMA3.1-Instruct-8B \
      --batch-sizes 1,2,4,8,16,32,64 --k 0-6 --input-len 1024 --output-len 256 --output runs/vllm.csv
Not run in CI (needs a GPU and vLLM); the readers it uses are tested with fixtures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from calibration import vllm_io  # noqa: E402


def ints(s: str) -> list[int]:
    out = []
    for p in s.split(","):
        a, _, b = p.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def spec_config(method: str, k: int, draft_model: str | None, ngram_max: int, ngram_min: int) -> dict:
    cfg: dict = {"method": method, "num_speculative_tokens": k}
    if method == "ngram":
        cfg.update(prompt_lookup_max=ngram_max, prompt_lookup_min=ngram_min)
    elif draft_model:
        cfg["model"] = draft_model
    return cfg


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited with code {proc.returncode}; see its log")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(5)
    raise TimeoutError(f"vllm serve not healthy after {timeout:.0f} s")


def scrape(url: str, path: Path) -> Path:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        path.write_bytes(r.read())
    return path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--method", default="ngram", help="ngram | eagle | eagle3 | draft_model | mtp | medusa ...")
    ap.add_argument("--draft-model", default=None, help="draft / EAGLE head checkpoint (not for ngram)")
    ap.add_argument("--ngram-max", type=int, default=4)
    ap.add_argument("--ngram-min", type=int, default=2)
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--k", default="0-6")
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--prompts-per-concurrency", type=int, default=8, help="num_prompts = this x B (min 32)")
    ap.add_argument("--dataset-name", default="random", help="random | sharegpt | hf ... (passed through)")
    ap.add_argument("--dataset-path", default=None)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--serve-args", default="", help="extra args for vllm serve, e.g. '--tensor-parallel-size 2'")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--workdir", default="vllm_runs")
    ap.add_argument("--output", required=True, help="CSV (engine-run schema)")
    ap.add_argument("--startup-timeout", type=float, default=1200)
    return ap


def bench_command(a: argparse.Namespace, b: int, work: Path, tag: str) -> list[str]:
    """`vllm bench serve` at concurrency ``b``, its result saved as ``work/bench_{tag}.json``."""
    bench = ["vllm", "bench", "serve", "--backend", "vllm", "--model", a.model, "--port", str(a.port),
             "--dataset-name", a.dataset_name, "--num-prompts", str(max(32, a.prompts_per_concurrency * b)),
             "--max-concurrency", str(b), "--temperature", str(a.temperature),
             "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,90,99",
             "--save-result", "--result-dir", str(work), "--result-filename", f"bench_{tag}.json",
             "--ignore-eos"]
    if a.dataset_name == "random":
        bench += ["--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len)]
    else:
        bench += ["--output-len", str(a.output_len)]
    if a.dataset_path:
        bench += ["--dataset-path", a.dataset_path]
    return bench


def _device_label() -> str:
    try:
        import torch
        return f"cuda: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    except Exception:
        return ""


def main() -> int:
    a = _parser().parse_args()

    import pandas as pd  # noqa: E402

    url = f"http://127.0.0.1:{a.port}"
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(a.output)
    done = set()
    if out.exists() and out.stat().st_size:
        df = pd.read_csv(out)
        done = {(int(r.batch_size), int(r.k)) for r in df[df.target == a.model].itertuples()}
    draft_name = "none" if a.method is None else (a.method if a.method == "ngram" else f"{a.method}:{a.draft_model}")
    device = _device_label()

    for k in ints(a.k):
        todo = [b for b in ints(a.batch_sizes) if (b, k) not in done]
        if not todo:
            continue
        cmd = ["vllm", "serve", a.model, "--port", str(a.port), "--dtype", a.dtype,
               "--max-num-seqs", str(max(todo)), *a.serve_args.split()]
        if k > 0:
            cmd += ["--speculative-config", json.dumps(spec_config(a.method, k, a.draft_model, a.ngram_max, a.ngram_min))]
        log = open(work / f"serve_k{k}.log", "w")
        print("+", " ".join(cmd), file=sys.stderr)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_healthy(url, proc, a.startup_timeout)
            for b in todo:
                _measure_point(a, url, work, out, k, b, draft_name, device)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)  # the server we started, and its workers
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            log.close()
    return 0


def _measure_point(a: argparse.Namespace, url: str, work: Path, out: Path, k: int, b: int, draft_name: str,
                   device: str) -> None:
    """One (K, B) point against the running server: /metrics, the bench, /metrics; its row appended to ``out``."""
    import pandas as pd

    tag = f"k{k}_c{b}"
    before = scrape(url, work / f"metrics_{tag}_before.txt")
    bench = bench_command(a, b, work, tag)
    print("+", " ".join(bench), file=sys.stderr)
    subprocess.run(bench, check=True)
    after = scrape(url, work / f"metrics_{tag}_after.txt")
    run = vllm_io.BenchRun(k=k, draft=draft_name if k else "none", batch_size=b, device=device,
                           dtype=a.dtype)
    row = vllm_io.bench_to_row(work / f"bench_{tag}.json", run, metrics_after=after if k else None,
                               metrics_before=before if k else None)
    pd.DataFrame([row], columns=list(vllm_io.ROW_COLUMNS)).to_csv(
        out, mode="a", header=not (out.exists() and out.stat().st_size), index=False)
    print(f"[vllm-sweep] K={k} B={b}: itl {row['itl_ms']:.2f} ms, AL {row['acceptance_length']:.2f}",
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
