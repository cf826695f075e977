#!/usr/bin/env bash
# Regenerates the measured data committed under calibration/data: the CPU calibration profile, the
# real speculative-decoding sweeps of the reference engine and their validation reports.
# Run it on a quiet machine (nothing else running): ~15 minutes on the 2-core dev box.
# Delete the files first to remeasure; every step resumes what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DATA=calibration/data

# One torch thread everywhere: on this 2-core VM two threads make step times jitter by 10-20%
# (a parallel region waits whenever the OS runs anything on the other core); one is steady (cv ~2%).
# GEMMs are also measured at every token count B*(K+1) the sweeps below use.
EXTRA_M=$($PY -c "print(','.join(str(b * (k + 1)) for b in (1, 2, 4, 8, 16, 32, 64) for k in range(7)))")

# 1. microbenchmarks -> raw samples + fitted profile (held-out errors printed)
$PY -m calibration.run --mode medium --threads 1 --extra-m "$EXTRA_M" --output-dir $DATA --name cpu-xeon-2c

# 2. real SD of SmolLM2-135M with n-gram drafts, B 1..64 x K 0..6 (greedy; every K timed over the
#    same tokens; 3 rounds each over every point; small batches repeated until 4 sequences were seen)
$PY -m calibration.engine sweep --target smollm2-135m --draft ngram --batch-sizes 1,2,4,8,16,32,64 --k 0-6 \
    --context-len 128 --warmup-tokens 96 --gen-tokens 16 --rounds 3 --min-sequences 4 \
    --warmup-steps 1 --min-steps 4 --max-steps 12 --threads 1 --output $DATA/runs/smollm2-cpu-ngram.csv

# 3. the synthetic MoE target: a timing sweep (random weights: acceptance imposed at 0.7)
$PY -m calibration.engine sweep --target moe-synthetic --draft ngram --batch-sizes 1,2,4,8,16,32,64 --k 0-6 \
    --context-len 128 --gen-tokens 16 --rounds 3 --forced-acceptance 0.7 \
    --warmup-steps 1 --min-steps 4 --max-steps 12 --threads 1 --output $DATA/runs/moe-synthetic-cpu.csv

# 4. validation reports (Markdown, PNG chart, JSON summary); the dense run's fitted engine terms
#    (kernel speed vs the microbenchmarks, host time per step) go into the profile
$PY -m calibration.validate --measured $DATA/runs/smollm2-cpu-ngram.csv --scenario scenarios/smollm2-cpu.toml \
    --output-dir $DATA/validation/smollm2-cpu --update-profile > /dev/null
$PY -m calibration.validate --measured $DATA/runs/moe-synthetic-cpu.csv --scenario scenarios/moe-synthetic-cpu.toml \
    --output-dir $DATA/validation/moe-synthetic-cpu > /dev/null
echo "done: $DATA"
