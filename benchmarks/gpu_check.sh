#!/usr/bin/env bash
# The device check of drill's CUDA paths, in ONE call of the device machine (H200, torch 2.11+cu130, no internet).
#
#   bash benchmarks/gpu_check.sh                 # on the GPU machine: writes to $OUT, prints a summary
#   bash benchmarks/gpu_check.sh --cpu-dry-run   # here: the same steps on the CPU, tiny sizes
#
# Steps, each under its own timeout (a step that fails or times out is reported; the next still runs):
#   env        python, torch, CUDA device, the packages drill needs (fsrs/platformdirs are not needed here)
#   install    drill importable from this checkout (pip -e --no-deps --no-build-isolation, or a copy + .pth)
#   selftest   python -m drill.reference.selftest (fused bf16 kernels vs the math path, SDPA math kernel off)
#   refbench   python benchmarks/reference_bench.py (CPU part, then GQA attention to T=16k and RMSNorm bandwidth)
#   bench_*    drill bench --device cuda --json on the good attention, rmsnorm and swiglu fixtures
#   pytest     pytest -m cuda on the test files that have CUDA tests
# Files in $OUT (at most 8 come back): gpu_check.log (every step's output), bench_<exercise>.json, summary.txt.
# Expected total on an H200: about 4 minutes. Budget the device call at 500 s.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
DRY=0
[ "${1:-}" = "--cpu-dry-run" ] && DRY=1
OUT=${OUT:-$ROOT/.gpu_check_out}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
SUMMARY=$OUT/summary.txt
: > "$LOG"
: > "$SUMMARY"
PY=${PYTHON:-python3}
[ $DRY = 1 ] && [ -x "$ROOT/.venv/bin/python" ] && PY=${PYTHON:-$ROOT/.venv/bin/python}
export PYTHONUNBUFFERED=1
# Every drill step runs `python -P`: without it, `-m`/`-c` put the current folder (this checkout) first on
# sys.path, and its drill/ (which lacks drill/reference: that lives in reference/) would shadow the install.
DRILL_HOME=$(mktemp -d)  # drill's progress store: a scratch one (and platformdirs is then never imported)
export DRILL_HOME
T0=$(date +%s)

# step NAME SECONDS CMD...: run CMD under a timeout (SIGINT first, so drill cleans up its own child), log it.
step() {
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  echo "===== $name ($*) =====" >> "$LOG"
  # bash -c: the steps may be the shell functions below (exported), which `timeout` cannot run directly.
  timeout -s INT -k 15 "$limit" bash -c '"$@"' _ "$@" >> "$LOG" 2>&1
  rc=$?
  local secs=$(( $(date +%s) - start ))
  local verdict=ok
  [ $rc -ne 0 ] && verdict="FAILED rc=$rc"
  [ $rc -eq 124 ] && verdict="TIMED OUT after ${limit}s"
  echo "===== $name: $verdict (${secs}s) =====" >> "$LOG"
  printf '%-16s %-22s %4ss\n' "$name" "$verdict" "$secs" | tee -a "$SUMMARY"
  return $rc
}

env_report() {
  "$PY" - <<'EOF'
import importlib, platform, shutil, subprocess, sys
print("python", sys.version.split()[0], sys.executable, platform.machine())
try:
    import torch
    print("torch", torch.__version__, "cuda available:", torch.cuda.is_available(), "cuda", torch.version.cuda)
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        print("device", p.name, f"{p.total_memory / 2**30:.0f} GiB", "capability", f"{p.major}.{p.minor}")
except Exception as exc:  # noqa: BLE001
    print("torch: NOT IMPORTABLE:", exc)
missing = []
from importlib import metadata
for name, dist in (("typer", "typer"), ("rich", "rich"), ("click", "click"), ("yaml", "PyYAML"), ("numpy", "numpy"),
                   ("pytest", "pytest"), ("hypothesis", "hypothesis"), ("fsrs", "fsrs"),
                   ("platformdirs", "platformdirs"), ("setuptools", "setuptools"), ("wheel", "wheel")):
    try:
        importlib.import_module(name)
        print(f"  {name:<12} {metadata.version(dist)}")
    except Exception as exc:  # noqa: BLE001
        missing.append(name)
        print(f"  {name:<12} MISSING ({type(exc).__name__})")
need = {"typer", "rich", "click", "yaml", "numpy", "pytest"}
print("missing and needed for this check:", sorted(need & set(missing)) or "none",
      "| missing, not needed here:", sorted(set(missing) - need) or "none")
if shutil.which("nvidia-smi"):
    subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm",
                    "--format=csv"], check=False)
EOF
}

install_drill() {
  # Already importable from this checkout (the dry run's venv)? Then leave it alone.
  if "$PY" -P -c "import drill, drill.reference, sys; sys.exit(0 if drill.__file__.startswith('$ROOT/') else 1)" 2>/dev/null; then
    echo "drill already importable from $ROOT"; return 0
  fi
  # The benchmark and grader children run `python -I` (no PYTHONPATH), so drill must be INSTALLED.
  if "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e "$ROOT"; then
    echo "installed with pip -e"
  else
    echo "pip -e failed; falling back to a copy of the package tree + a .pth file"
    "$PY" - "$ROOT" <<'EOF' || return 1
import shutil, sys, sysconfig, tempfile
from pathlib import Path
root = Path(sys.argv[1])
dest = Path(tempfile.mkdtemp(prefix="drill-src-"))
shutil.copytree(root / "drill", dest / "drill")
for sub in ("reference", "questions", "exercises"):
    shutil.copytree(root / sub, dest / "drill" / sub)
site = Path(sysconfig.get_paths()["purelib"])
(site / "drill_gpu_check.pth").write_text(str(dest) + "\n")
print("drill copied to", dest, "and added to", site)
EOF
  fi
  "$PY" -P -c "import drill, drill.reference, drill.bench.run; print('drill importable from', drill.__file__)"
}

# drill bench on one good fixture per exercise. Default CUDA ladders (attention to T=16384); the dry run caps sizes.
bench() {
  local ex=$1 file=$2 cap=$3
  local args=(bench "$file" --exercise "$ex" --device "$DEVICE" --json --seed 7)
  [ $DRY = 1 ] && args+=(--max-size "$cap")
  "$PY" -P -m drill.cli "${args[@]}" > "$OUT/bench_$ex.json"
}
if [ $DRY = 1 ]; then
  DEVICE=cpu
  echo "CPU DRY RUN: same steps, --device cpu, tiny ladders" | tee -a "$SUMMARY"
else
  DEVICE=cuda
fi

export ROOT OUT PY DRY DEVICE
export -f env_report install_drill bench
step env 60 env_report
step install 180 install_drill || { echo "drill could not be installed: stopping" | tee -a "$SUMMARY"; exit 1; }
step selftest 240 "$PY" -P -m drill.reference.selftest
SELFTEST_RC=$?
step refbench 240 "$PY" -P benchmarks/reference_bench.py

step bench_attention 240 bench attention tests/fixtures/solutions/attention/good_matmul_softmax.py 256
step bench_rmsnorm 200 bench rmsnorm tests/fixtures/solutions/rmsnorm/good_rsqrt.py 1024
step bench_swiglu 200 bench swiglu tests/fixtures/solutions/swiglu/good_f_silu.py 256

mapfile -t CUDA_TESTS < <(grep -l "mark.cuda" tests/test_*.py)
DESELECT=()
# The standalone selftest step already ran what this test re-runs in a subprocess.
[ "$SELFTEST_RC" = 0 ] && DESELECT=(--deselect tests/test_reference_selftest.py::test_selftest_on_cuda_subprocess)
step pytest_cuda 300 "$PY" -P -m pytest -q -p no:cacheprovider -m cuda "${CUDA_TESTS[@]}" "${DESELECT[@]}"

# What the bench runs measured, in a few lines per exercise.
"$PY" - "$OUT" <<'EOF' | tee -a "$SUMMARY"
import json, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("bench_*.json")):
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        print(f"{path.name}: not JSON (see gpu_check.log)")
        continue
    head = (f"{doc.get('exercise')}: exit {doc.get('exit_code')}, {doc.get('device_name')}, {doc.get('dtype')}, "
            f"copy peak {doc.get('peak_bandwidth_gb_s') or 0:.0f} GB/s (0 = not measured), host RSS {doc.get('host_peak_rss_mb')} MB")
    print(head)
    for s in doc.get("sizes", []):
        cells = []
        for impl in ("learner", "fused", "math"):
            r = s["results"][impl]
            if r["status"] != "ok":
                cells.append(f"{impl} {r['status']}")
                continue
            cell = f"{impl} {r['median_s'] * 1e3:.3f} ms {r['peak_bytes'] / 2**20:.0f} MiB"
            if r.get("bandwidth_fraction"):
                cell += f" {100 * r['bandwidth_fraction']:.0f}%peak"
            if impl != "fused" and r.get("ratio_to_fused"):
                cell += f" x{r['ratio_to_fused']:.2f}"
            cells.append(cell)
        print(f"  {doc.get('size_label')}={s['size']}: " + " | ".join(cells))
    print(f"  exponents {doc.get('exponents')}; stopped: {doc.get('stopped')}; learner_error: {doc.get('learner_error')}")
EOF
echo "total $(( $(date +%s) - T0 ))s; files in $OUT" | tee -a "$SUMMARY"
grep -q -E "FAILED|TIMED OUT" "$SUMMARY" && exit 1
exit 0
