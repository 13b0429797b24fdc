#!/usr/bin/env bash
# One command that re-measures a single GPU for the project: the calibration (sized to the device, self-checked),
# the test set and the reference sweep on the same machine, the CUDA-only tests, and on request idle/hot-idle
# power and MFU and an NVML counter trace, all packed into one archive. About 7.5 minutes on an H200. Run it from a
# clone of the project, on the GPU's machine:
#
#     bash benchmarks/gpu_check.sh [OUT_DIR]       # -> OUT_DIR/gpu_check-<device>-<UTC time>.tgz (default build/)
#     STEPS="calibrate testset repeat tests" bash benchmarks/gpu_check.sh OUT_DIR     # only these steps
#
# Steps, in this order (STEPS picks some; the default, about 7.5 minutes, is probe calibrate testset sweep: the
# calibration and the runs it predicts from one machine, since a host-bound step's time is the host's). The
# archive unpacks as a one-machine set, data/reference/<device>/one-machine[-<n>]/ (<device>.json, runs/,
# testset/runs/; a new set is named in companion.energy.reference.ONE_MACHINE_SETS):
#   probe      nvidia-smi and the stack's versions
#   calibrate  companion calibrate --device cuda (sized to the device, self-checked; ~40 s; with modes, it also
#              probes the compiled modes: --executions compile,cudagraphs, ~1.5 min more; with attention, those
#              modes with attention left out of the graphs as well, ~1.5 min more again)
#   testset    the GPU test set, profile gpu-test (6 runs drawn once, never tuned on; ~3 min)
#   sweep      the reference profile data/reference/H200/gpu-check.yaml (7 runs, ~3.5 min)
#   repeat     two of the reference configurations again (data/reference/H200/gpu-repeat.yaml; ~1 min)
#   reference  idle / hot-idle power, MFU and GFLOP/J of BERT-base (benchmarks/gpu_reference.py; ~35 s)
#   modes      BERT-base s128 and s512 b32 eager, compiled and with CUDA graphs, through HF Accelerate, and two
#              other sizes compiled (data/reference/H200/gpu-modes.yaml; ~5 min, compilation included)
#   attention  BERT-base s512 and s128 b32 compiled with SDPA left out of the graphs (attn sdpa-nocompile) beside
#              eager and the whole-model compile, and the modes-elsewhere runs again
#              (data/reference/H200/gpu-attention.yaml, 10 runs; ~6 min, compilation included)
#   masked     BERT-base s512 and s128 b32 eager, compiled and with CUDA graphs as the runner compiles them now (the
#              all-ones mask kept, bf16 autocast inside the compiled forward; data/reference/H200/gpu-modes-masked.yaml,
#              6 runs, ~4.5 min), and with the calibrate step the compiled modes probed (--executions)
#   sdpa       which attention kernel the compiled graph keeps, per set-up, and BERT-base s512 b32 timed in those that
#              keep a fused one (benchmarks/compiled_sdpa.py; ~2.5 min); SDPA_MODES=max-autotune-no-cudagraphs also
#              times the runner's set-up in that torch.compile mode (minutes of autotuning more)
#   counter    8 s of the raw NVML energy counter (~30 s)
#   tests      the CUDA-only tests, marker gpu (~1 min: one of them calibrates)
#
# With a GPU stack installed already (torch with CUDA, transformers, nvidia-ml-py, CodeCarbon), it runs from the
# tree (PYTHONPATH=src) and never installs anything; each step's output is kept even when a later one fails,
# and the archive is re-packed after every step, so a machine that is taken back mid-way still leaves one.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/build}
mkdir -p "$OUT"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
PY=${PYTHON:-python3}
DEVICE=$($PY -c 'import torch; from companion.runs.provenance import short_gpu_name as s; print(s(torch.cuda.get_device_name(0)))') \
  || { echo "error: no CUDA GPU visible to $PY (torch.cuda); run this on the GPU's machine" >&2; exit 2; }
STAMP=$(date -u +%Y%m%dT%H%M%S)
W=$(mktemp -d)
ARCHIVE="$OUT/gpu_check-$DEVICE-$STAMP.tgz"
exec > >(tee -a "$W/gpu_check.log") 2>&1
pack() { tar -czf "$ARCHIVE" --exclude=.lock --exclude=.plans --exclude=logs -C "$W" . && echo "packed $ARCHIVE"; }
step() {  # name, command...: time one step, keep going when it fails, re-pack
  local name=$1; shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@"; echo "== $name: exit $? after $((SECONDS - t0)) s"
  pack
}
cd "$ROOT"
STEPS=${STEPS:-probe calibrate testset sweep}
echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown); steps: $STEPS"
want() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
want probe && step probe sh -c "nvidia-smi; $PY -c 'import torch, transformers; print(torch.__version__, transformers.__version__)'"
# with the modes step, the calibration also probes the compiled modes' host time and kernels (~1.5 min more), and
# with the attention step those modes with attention left out of the graphs too (their graph breaks' host time)
# (EXECUTIONS=compile,cudagraphs asks for the probe without the modes step)
EXECUTIONS=${EXECUTIONS:-}; { want modes || want masked; } && EXECUTIONS=${EXECUTIONS:-compile,cudagraphs}
want attention && EXECUTIONS=${EXECUTIONS:-compile,cudagraphs},compile+sdpa-nocompile,cudagraphs+sdpa-nocompile
want calibrate && step calibrate $PY -m companion.cli calibrate --device cuda --out "$W/$DEVICE.json" \
  ${EXECUTIONS:+--executions $EXECUTIONS}
want testset && step testset $PY -m companion.cli sweep --profile gpu-test --device-name "$DEVICE" \
  --out "$W/testset/runs" --quiet
want sweep && step sweep $PY -m companion.cli sweep --profile data/reference/H200/gpu-check.yaml --device-name "$DEVICE" \
  --out "$W/runs" --quiet
want repeat && step repeat $PY -m companion.cli sweep --profile data/reference/H200/gpu-repeat.yaml \
  --device-name "$DEVICE" --out "$W/repeat/runs" --quiet
want reference && step reference $PY benchmarks/gpu_reference.py --out "$W/gpu_reference.json" --idle-s 8
want modes && step modes $PY -m companion.cli sweep --profile data/reference/H200/gpu-modes.yaml \
  --device-name "$DEVICE" --out "$W/modes/runs" --quiet
want attention && step attention $PY -m companion.cli sweep --profile data/reference/H200/gpu-attention.yaml \
  --device-name "$DEVICE" --out "$W/attention/runs" --quiet
want masked && step masked $PY -m companion.cli sweep --profile data/reference/H200/gpu-modes-masked.yaml \
  --device-name "$DEVICE" --out "$W/modes-masked/runs" --quiet
want sdpa && step sdpa $PY benchmarks/compiled_sdpa.py --out "$W/compiled_sdpa.json" ${SDPA_MODES:+--modes $SDPA_MODES}
want counter && step counter $PY benchmarks/record_meter_log.py --counter-trace 8 --device cuda --out "$W/nvml_counter_$DEVICE.jsonl"
want tests && step tests $PY -m pytest -q -p no:cacheprovider -o addopts="" -m gpu tests/runs/test_calibrate.py \
  tests/energy/test_memory.py tests/runs/test_meters.py tests/runs/test_execution.py
echo "done: $ARCHIVE (unpack into data/reference/$DEVICE/one-machine-<n>/, name it in reference.ONE_MACHINE_SETS, and score with python benchmarks/model_accuracy.py --device $DEVICE)"
