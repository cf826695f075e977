"""What a new user met walking the commands (README, docs/guide.md, each --help), one test per bug found:
each refusal is one 'error:' line that names the file or flag at fault, exit 2."""
from __future__ import annotations

import json
from pathlib import Path

from cli_inprocess import refused_line, run_main

REPO = Path(__file__).resolve().parent.parent  # paths given to the commands: pytest may start anywhere

SCENARIO = '[model]\nname = "llama-3.1-8b"\n[hardware]\nname = "h100-sxm"\n'


def test_bad_traffic_length_names_the_file_and_key(tmp_path):
    # was: 'error: length distribution fixed -5: parameters out of range ...' (no file, no key)
    path = tmp_path / "lengths.toml"
    path.write_text(SCENARIO + "[traffic]\nprompt_len = -5\n")
    line = refused_line("simulator.serve", "--scenario", path)
    assert str(path) in line and "traffic.prompt_len" in line
    path.write_text(SCENARIO + '[traffic]\noutput_len = {dist = "uniform", low = 9, high = 2}\n')
    line = refused_line("simulator.serve", "--scenario", path)
    assert str(path) in line and "traffic.output_len" in line


def test_bad_parallel_layout_names_the_file(tmp_path):
    # was: 'error: tp, ep and dp must be >= 1, got tp=-1, ...' (which file?)
    path = tmp_path / "layout.toml"
    path.write_text(SCENARIO.replace('"h100-sxm"\n', '"h100-sxm"\ntp = -1\n'))
    assert refused_line("simulator.predict", "--scenario", path).startswith(f"error: {path}: ")
    path.write_text(SCENARIO.replace('"h100-sxm"\n', '"h100-sxm"\ntp = 3\n'))
    assert refused_line("simulator.predict", "--scenario", path).startswith(f"error: {path}: tp=3 does not divide")
    # a flag's value still blames the flag
    assert refused_line("simulator.predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "0"
                    ).startswith("error: --tp 0: ")


def test_price_must_be_finite(tmp_path):
    # was: --price h100-sxm=nan (or prices = { h100-sxm = inf } in [sizing]) sized the fleet at $nan/h
    base = '[model]\nname = "llama-3.1-8b"\n[hardware]\nname = "h100-sxm"\n'
    for value in ("nan", "inf", "-1"):
        line = refused_line("simulator.size", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--rate", "5",
                        "--tpot-p50", "0.05", "--price", f"h100-sxm={value}")
        assert line.startswith(f"error: --price h100-sxm={value}: ")
    for value in ("nan", "inf"):
        path = tmp_path / f"price-{value}.toml"
        path.write_text(base + f'[traffic]\nrate_per_s = 5.0\n[slo]\ntpot_p50_s = 0.05\n[sizing]\n'
                        f'candidates = ["h100-sxm"]\nprices = {{ h100-sxm = {value} }}\n')
        line = refused_line("simulator.size", "--scenario", path)
        assert str(path) in line and "prices.h100-sxm" in line


def test_k_max_below_the_default_fixed_k_is_legal():
    # was: --k-max 1 alone -> 'error: --k-max 1: fixed_k=3 exceeds k_max=1' (the user never set fixed_k)
    flags = ("--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch-sizes", "1,64", "--format", "json")
    for k_max in (0, 1, 2):
        done = run_main("simulator.predict", *flags, "--k-max", k_max)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["fixed_k"] == min(3, k_max)  # the default fixed K (3), or k_max below it
        assert {row["k_opt"] for row in answer["rows"]} <= set(range(k_max + 1))
    # a fixed K the user gave above k_max is still refused, with the fix
    line = refused_line("simulator.predict", *flags, "--k-max", "2", "--fixed-k", "4")
    assert "fixed_k=4 exceeds k_max=2" in line and "--fixed-k" in line


def test_serve_says_what_its_step_times_rest_on_and_their_band():
    # was: serve's table ended with the model line alone: no basis, no band (predict prints both)
    from simulator.plan.api import predict
    done = run_main("simulator.serve", "--scenario", "llama-3.1-8b-h100", "--policy", "dsd", "--requests", "40")
    assert done.returncode == 0, done.stderr
    pred = predict("llama-3.1-8b-h100")
    assert f"# step times: {pred.provenance['step_time_source']}\n" in done.stdout
    assert f"# how far to trust them: {pred.provenance['uncertainty']}\n" in done.stdout
    assert "# how far to trust them: +-" in done.stdout  # h100-sxm has published rows: a number, not 'unknown'


def test_measured_rows_refuse_fractional_counts_and_quote_plainly(tmp_path):
    # was: batch_size 1.5 was rounded to 2 and fitted as a run at B = 2; a NaN was quoted as np.float64(nan)
    rows = {"frac-b.csv": ("batch_size,k,itl_ms\n1.5,0,16.8\n8,3,19.0\n", "column 'batch_size' line 2 holds 1.5"),
            "frac-k.csv": ("batch_size,k,itl_ms\n1,0,16.8\n8,2.5,19.0\n", "column 'k' line 3 holds 2.5"),
            "nan.csv": ("batch_size,k,itl_ms\n1,0,nan\n8,3,19.0\n", "column 'itl_ms' line 2 holds 'nan'")}
    for name, (text, said) in rows.items():
        path = tmp_path / name
        path.write_text(text)
        line = refused_line("calibration.fit_deployment", "--scenario", "llama-3.1-8b-h100", "--measured", path,
                        "--output", tmp_path / "fit.json")
        assert said in line and "np." not in line, line
    assert not (tmp_path / "fit.json").exists()
    path = tmp_path / "whole.csv"  # whole numbers written as floats are whole numbers
    path.write_text("batch_size,k,itl_ms\n1.0,0,6.2\n8,3.0,9.9\n")
    done = run_main("calibration.fit_deployment", "--scenario", "llama-3.1-8b-h100", "--measured", path,
                    "--output", tmp_path / "fit.json")
    assert done.returncode == 0, done.stderr


def test_breakdown_total_reconciles_with_the_table_step():
    # was: '--breakdown 64,3' ended 'total 12.597 ms' while the K* table's step at B=64, K=3 is 16.637 ms: the
    # operators' physics without the learned layer's kernel scale and host time, and nothing said so
    import re
    from simulator.plan.api import predict
    # on vLLM 0.11, which hides no host time (on 0.33 the learned host terms hide behind the GPU step)
    done = run_main("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--engine-version", "0.11.0",
                    "--breakdown", "64,3")
    assert done.returncode == 0, done.stderr
    footer = done.stdout.splitlines()[-1]
    found = re.search(r"verify ([\d.]+) \+ draft ([\d.]+) ms .* \+ host ([\d.]+) ms = ([\d.]+) ms$", footer)
    assert found, footer
    verify, draft, host, step = map(float, found.groups())
    rows = predict("llama-3.1-8b-h100", engine_version="0.11.0").grid_rows
    cell = rows[(rows.batch_size == 64) & (rows.k == 3)].iloc[0]
    assert step == round(cell.itl_ms, 3) and abs(verify + draft + host - step) <= 0.002
    assert host > 1.0  # the learned host terms (about 3.5 ms here), which the operators' total leaves out


def test_serve_policy_numbers_say_what_they_take():
    # was: fixed:-1 -> "only fixed:K and cutoff:B take a number" (it is fixed:K); fixed:99 -> "no memory left for
    # the KV cache" (a K of 99 draft tokens, past the planner's 32)
    base = ("--scenario", "llama-3.1-8b-h100", "--requests", "20", "--policy")
    for policy in ("fixed:-1", "fixed:33", "fixed:99"):
        line = refused_line("simulator.serve", *base, policy)
        assert line.startswith(f"error: --policy: policy '{policy}': give a K from 0 to 32"), line
    assert "give a batch size" in refused_line("simulator.serve", *base, "cutoff:x")
    assert "only fixed:K and cutoff:B" in refused_line("simulator.serve", *base, "dsd:3")
    assert run_main("simulator.serve", *base, "fixed:32").returncode == 0


def test_markdown_and_kmap_say_what_they_rest_on_and_their_band():
    # was: --format markdown named the step times' source without a band; --format kmap named neither
    from simulator.plan.api import predict
    prov = predict("qwen3-235b-h200").provenance
    for fmt in ("markdown", "kmap"):
        done = run_main("simulator.predict", "--scenario", "qwen3-235b-h200", "--format", fmt, "--context-lens", "512,4096")
        assert done.returncode == 0, done.stderr
        head = "\n".join(done.stdout.splitlines()[:4])
        assert prov["step_time_source"] in head and prov["uncertainty"] in head, (fmt, head)


def test_breakdown_outside_the_plan_says_so():
    # was: --breakdown 99999,1 priced a batch 385x beyond memory without a word; --breakdown 1,99 a K past 32
    flags = ("--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--breakdown")
    done = run_main("simulator.predict", *flags, "4096,1")
    assert done.returncode == 0
    assert "warning: --breakdown 4096,1 does not fit in memory: at B=4096, K=1:" in done.stderr
    assert "does not fit" not in run_main("simulator.predict", *flags, "64,3").stderr
    assert "K from 0 to 32" in refused_line("simulator.predict", *flags, "1,33")


def test_tensor_parallel_needs_an_interconnect():
    # was: --hardware cpu-xeon-2c --tp 8 predicted '8 x cpu-xeon-2c' over the file's placeholder interconnect
    # (interconnect = "none", [assumed] 10 GB/s "one CPU, no device interconnect")
    line = refused_line("simulator.predict", "--model", "llama-3.1-8b", "--hardware", "cpu-xeon-2c", "--tp", "8")
    assert line.startswith("error: --tp 8: ") and 'interconnect = "none"' in line and "use tp = 1" in line
    assert run_main("simulator.predict", "--model", "smollm2-135m", "--hardware", "cpu-xeon-2c",
                    "--batch-sizes", "1").returncode == 0


def test_serve_graphs_csv_is_refused_not_two_tables_in_one_file():
    # was: --graphs --format csv printed the summary CSV and the graphs CSV one after the other: a file no CSV
    # reader parses (the second header read as a row of the first table)
    base = ("--scenario", "llama-3.1-8b-h100", "--policy", "dsd", "--requests", "20", "--graphs")
    assert "--format json" in refused_line("simulator.serve", *base, "--format", "csv")
    done = run_main("simulator.serve", *base, "--format", "json")
    assert done.returncode == 0 and set(json.loads(done.stdout)) == {"provenance", "summary", "graphs"}


def test_save_scenario_onto_the_output_isrefused_line(tmp_path):
    # was: --output X --save-scenario X wrote the engine file, then replaced it with the scenario (exit 0)
    out = tmp_path / "spec.json"
    out.write_text("keep me")
    (tmp_path / "link").symlink_to(out)
    for save in (out, tmp_path / "link"):
        line = refused_line("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--format", "vllm",
                        "--output", out, "--save-scenario", save)
        assert line.startswith(f"error: --save-scenario {save}: the same file as --output")
    assert out.read_text() == "keep me"
    line = refused_line("calibration.fit_deployment", "--scenario", "smollm2-cpu", "--measured",
                    REPO / "calibration/data/runs/smollm2-cpu-ngram.csv", "--output", out, "--save-scenario", out)
    assert "the same file as --output" in line and out.read_text() == "keep me"


def test_a_fit_stores_the_acceptance_positions_it_measured(tmp_path):
    # was: a K = 3 bench run's 3 measured rates were written as 8 ('rates given for positions 1-8 ... measured on
    # this deployment'), positions 4-8 copies of the 3rd, so K* = 5-6 used them with no warning
    fit = tmp_path / "fit.json"
    done = run_main("calibration.fit_deployment", "--scenario", "llama-3.1-8b-h100", "--measured",
                    REPO / "tests/fixtures/vllm/bench_k0_c8.json",
                    REPO / "tests/fixtures/vllm/bench_k3_c8.json", "--output", fit)
    assert done.returncode == 0, done.stderr
    acc = json.loads(fit.read_text())["acceptance"]
    # the fixture's unconditional 0.7866, 0.6105, 0.4410 as conditional rates: three positions, no more
    assert acc["rates"] == [0.7866, round(0.6105 / 0.7866, 6), round(0.4410 / 0.6105, 6)] and len(acc["interval"]) == 3
    done = run_main("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--deployment", fit)
    assert "rates given for positions 1-3" in done.stdout
    assert "uses acceptance positions beyond the 3 given" in done.stderr


def test_a_fit_for_another_deployment_says_what_it_was_compared_with(tmp_path):
    # was: 'fitted for another deployment than flags: model ...'
    fit = tmp_path / "fit.json"
    assert run_main("calibration.fit_deployment", "--scenario", "smollm2-cpu", "--measured",
                    REPO / "calibration/data/runs/smollm2-cpu-ngram.csv", "--output", fit).returncode == 0
    line = refused_line("simulator.predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--deployment", fit)
    assert "fitted for another deployment than the flags give: model 'smollm2-135m'" in line


def test_an_empty_flag_value_is_blamed_on_the_flag():
    # was: --acceptance '' -> 'error: acceptance needs at least one rate' (which flag?): an empty value matched
    # every message as 'already naming it'
    flags = ("--model", "llama-3.1-8b", "--hardware", "h100-sxm")
    assert refused_line("simulator.predict", *flags, "--acceptance", "").startswith("error: --acceptance : ")
    assert refused_line("simulator.predict", *flags, "--batch-sizes", "").startswith("error: --batch-sizes : ")
