#!/usr/bin/env bash
# Every GPU check of issue 17 in ONE call of the device machine (H200, torch 2.11+cu130, triton 3.6, no internet).
#
#   bash benchmarks/gpu_check.sh                 # on the GPU machine: writes to $OUT, prints the summary
#   bash benchmarks/gpu_check.sh --cpu-dry-run   # here: the same steps on the CPU, tiny sizes
#
# Steps, each under its own timeout, and all under one budget (BUDGET_S, default 450 s: a step that would
# start past it is skipped and says so, so the whole script ends in under eight minutes):
#   env        python, torch, CUDA device, triton, the packages drill needs
#   install    drill importable from this checkout (pip -e --no-deps --no-build-isolation, or a copy + .pth)
#   selftest   python -m drill.reference.selftest: fused vs math, every SDPA backend forced alone and the aten
#              op that ran, the default choice, F.rms_norm's fused op            -> selftest.txt
#   bench_attention  drill bench --device cuda on the eager fixture, ladder to T = 16384: flash vs eager time
#              and peak memory, growth exponents                                  -> bench_attention.json
#   bench_rmsnorm    drill bench --device cuda: bandwidth as % of the copy and of the datasheet peak
#                                                                                 -> bench_rmsnorm.json
#   checks     benchmarks/gpu_checks.py: every exercise's `drill check --device cuda` on a good and a buggy
#              file (and the forbidden-op fixtures), plus cold CPU vs CUDA check wall times -> checks.json
#   pytest_cuda  pytest -m cuda on the files with CUDA tests                      -> pytest_cuda.txt
# Files in $OUT (7, of the 8 that come back): gpu_check.log, summary.txt and the five above.
# Expected total on an H200: 5-6 minutes. Call it with timeout_s=560.
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
BUDGET_S=${BUDGET_S:-450}
export PYTHONUNBUFFERED=1
# Every drill step runs `python -P`: without it, `-m`/`-c` put the current folder (this checkout) first on
# sys.path, and its drill/ (which lacks drill/reference: that lives in reference/) would shadow the install.
DRILL_HOME=$(mktemp -d)  # drill's progress store: a scratch one (and platformdirs is then never imported)
export DRILL_HOME DRILL_NO_SERVER=1
T0=$(date +%s)

# step NAME SECONDS CMD...: run CMD under a timeout (SIGINT first, so drill cleans up its own child), log it;
# skipped when the budget is spent (a skipped step counts as a failure in the exit status).
step() {
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  if [ $(( start - T0 + 10 )) -gt "$BUDGET_S" ]; then
    printf '%-16s %-22s %4ss\n' "$name" "SKIPPED (budget)" 0 | tee -a "$SUMMARY"
    return 99
  fi
  local left=$(( BUDGET_S - (start - T0) ))
  [ "$limit" -gt "$left" ] && limit=$left
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
        print("device", p.name, f"{p.total_memory / 2**30:.0f} GiB", "capability", f"{p.major}.{p.minor}",
              "memory clock", getattr(p, "memory_clock_rate", "?"), "bus width", getattr(p, "memory_bus_width", "?"))
except Exception as exc:  # noqa: BLE001
    print("torch: NOT IMPORTABLE:", exc)
missing = []
from importlib import metadata
for name, dist in (("typer", "typer"), ("rich", "rich"), ("click", "click"), ("yaml", "PyYAML"), ("numpy", "numpy"),
                   ("pytest", "pytest"), ("triton", "triton"), ("hypothesis", "hypothesis"), ("fsrs", "fsrs"),
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
print("C compiler for Triton's launchers:", shutil.which("gcc") or shutil.which("clang") or "NONE")
print("user namespaces (the grader's sandbox):", open("/proc/sys/user/max_user_namespaces").read().strip())
if shutil.which("nvidia-smi"):
    subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm,clocks.max.mem",
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

selftest() {
  "$PY" -P -m drill.reference.selftest > "$OUT/selftest.txt" 2>&1
  local rc=$?
  cat "$OUT/selftest.txt"
  return $rc
}

# drill bench on one good fixture (the eager attention: T x T scores; the plain RMSNorm). Default CUDA ladders.
bench() {
  local ex=$1 file=$2 cap=$3
  local args=(bench "$file" --exercise "$ex" --device "$DEVICE" --json --seed 7 --timeout 150)
  [ $DRY = 1 ] && args+=(--max-size "$cap")
  "$PY" -P -m drill.cli "${args[@]}" > "$OUT/bench_$ex.json"
}

checks() {
  local args=(--out "$OUT/checks.json" --device "$DEVICE")
  [ $DRY = 1 ] && args+=(--reps 1)
  "$PY" -P benchmarks/gpu_checks.py "${args[@]}"
}

pytest_cuda() {
  mapfile -t files < <(grep -l "mark.cuda\|pytest.mark.cuda" tests/test_*.py)
  local deselect=()
  # What the steps above already measured, the tests need not redo (each re-runs a whole bench or selftest).
  [ "$SELFTEST_RC" = 0 ] && deselect+=(--deselect tests/test_reference_selftest.py::test_selftest_on_cuda_subprocess)
  [ "$BENCH_RC" = 0 ] && deselect+=(--deselect tests/test_bench_cuda.py::test_attention_fused_advantage_is_measured
                                    --deselect tests/test_bench_cuda.py::test_rmsnorm_bandwidth_is_a_fraction_of_the_copy_peak)
  "$PY" -P -m pytest -q -p no:cacheprovider -m cuda -rs "${files[@]}" "${deselect[@]}" > "$OUT/pytest_cuda.txt" 2>&1
  local rc=$?
  tail -40 "$OUT/pytest_cuda.txt"
  [ $rc -eq 5 ] && return 0  # nothing selected (the dry run deselects nothing, but a CPU machine skips all)
  return $rc
}

if [ $DRY = 1 ]; then
  DEVICE=cpu
  export DRILL_TRITON_INTERPRET=1  # the CUDA-only exercise's values through Triton's interpreter, if installed
  echo "CPU DRY RUN: same steps, --device cpu, tiny ladders" | tee -a "$SUMMARY"
else
  DEVICE=cuda
fi

export ROOT OUT PY DRY DEVICE
export -f env_report install_drill selftest bench checks pytest_cuda
step env 60 env_report
step install 120 install_drill || { echo "drill could not be installed: stopping" | tee -a "$SUMMARY"; exit 1; }
step selftest 120 selftest
SELFTEST_RC=$?
step bench_attention 170 bench attention tests/fixtures/solutions/attention/good_matmul_softmax.py 256
A_RC=$?
step bench_rmsnorm 120 bench rmsnorm tests/fixtures/solutions/rmsnorm/good_rsqrt.py 1024
R_RC=$?
BENCH_RC=$(( A_RC + R_RC ))
step checks 200 checks
export SELFTEST_RC BENCH_RC
step pytest_cuda 200 pytest_cuda

# The issue's targets and the run's figures, from the files above.
"$PY" - "$OUT" "$DRY" <<'EOF' | tee -a "$SUMMARY"
import json, re, sys
from pathlib import Path

out, dry = Path(sys.argv[1]), sys.argv[2] == "1"


def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None


def verdict(ok):
    return "n/a (CPU dry run)" if dry else ("PASS" if ok else "FAIL")


print("TARGETS (issue 17, an H200, one run)")
att = load("bench_attention.json")
if att and att.get("sizes"):
    last = att["sizes"][-1]
    r = last["results"]
    if all(r[i]["status"] == "ok" for i in ("learner", "fused")):
        speed = r["learner"]["median_s"] / r["fused"]["median_s"]
        memory = r["learner"]["peak_bytes"] / max(1, r["fused"]["peak_bytes"])
        exps = att.get("memory_exponents", {})
        print(f"  SDPA fused vs eager at T={last['size']}: {speed:.1f}x faster (target >= 5) {verdict(speed >= 5 and last['size'] >= 16384)}; "
              f"{memory:.1f}x less peak memory (target >= 10) {verdict(memory >= 10 and last['size'] >= 16384)}")
        print(f"    eager {r['learner']['median_s'] * 1e3:.2f} ms {r['learner']['peak_bytes'] / 2**20:.0f} MiB; fused "
              f"{r['fused']['median_s'] * 1e3:.2f} ms {r['fused']['peak_bytes'] / 2**20:.0f} MiB; math path "
              f"{r['math'].get('median_s') or 0:.4f} s")
        print(f"    memory growth exponents: eager {exps.get('learner')}, fused {exps.get('fused')}, math {exps.get('math')}; "
              f"time exponents {att.get('exponents')}")
    if last["size"] < 16384 and not dry:
        print(f"  T=16384 NOT reached: {att.get('stopped')}")
else:
    print("  SDPA flash vs eager: NOT MEASURED (see bench_attention in gpu_check.log)")
rms = load("bench_rmsnorm.json")
if rms and rms.get("sizes"):
    best = max((s["results"]["fused"].get("datasheet_fraction") or s["results"]["fused"].get("bandwidth_fraction") or 0, s["size"])
               for s in rms["sizes"])
    last = rms["sizes"][-1]["results"]["fused"]
    print(f"  fused RMSNorm bandwidth: best {100 * best[0]:.0f}% of the datasheet peak at d={best[1]} (target >= 70%) "
          f"{verdict(best[0] >= 0.70)}; at the largest size {last.get('bandwidth_gb_s') or 0:.0f} GB/s = "
          f"{100 * (last.get('datasheet_fraction') or 0):.0f}% datasheet, {100 * (last.get('bandwidth_fraction') or 0):.0f}% of "
          f"the copy ({rms.get('peak_bandwidth_gb_s')} GB/s copy, {rms.get('datasheet_bandwidth_gb_s')} GB/s datasheet)")
    lr = rms["sizes"][-1]["results"]["learner"]
    print(f"    the learner's torch-ops RMSNorm there: {100 * (lr.get('datasheet_fraction') or 0):.0f}% datasheet")
else:
    print("  fused RMSNorm bandwidth: NOT MEASURED (see bench_rmsnorm in gpu_check.log)")
chk = load("checks.json")
if chk:
    for t in chk.get("timing", []):
        if "ratio" in t:
            print(f"  drill check --device {chk['device']} vs cpu, cold, {t['exercise']}: {t['ratio']:.2f}x "
                  f"(target <= 1.5) {verdict(t['ratio'] <= 1.5)}  cpu {t['cpu_s']} s, {chk['device']} {t.get(chk['device'] + '_s')} s")
        else:
            print(f"  drill check timing {t['exercise']}: NOT MEASURED: {t.get('error')}")
    rows = chk.get("verdicts", [])
    graded = [r for r in rows if "skipped" not in r]
    good = [r for r in graded if r.get("ok")]
    print(f"VERDICTS on {chk['device']}: {len(good)}/{len(graded)} as the file names say"
          + "".join(f"\n  NOT: {r['exercise']}/{r.get('file')}: got {r.get('got', r.get('error'))} ({r.get('detail', '')[:160]})"
                    for r in graded if not r.get("ok")))
    for r in rows:
        if "skipped" in r:
            print(f"  skipped {r['exercise']}: {r['skipped']}")
    seen = {r["device"] for r in graded if "device" in r}
    print(f"  devices: {sorted(seen)}")
    backends = {r["exercise"]: r["reference_backend"] for r in graded if r.get("file", "").startswith("good_")}
    for ex, b in backends.items():
        print(f"  reference_backend {ex}: {b}")
    for r in graded:
        for line in r.get("audit", []):
            if "bandwidth audit" in line:
                print(f"  triton_rmsnorm {r['file']}: {line}")
else:
    print("VERDICTS: NOT MEASURED (see checks in gpu_check.log)")
st = (out / "selftest.txt").read_text() if (out / "selftest.txt").exists() else ""
m = re.search(r"(\d+)/(\d+) passed", st)
print(f"SELFTEST: {m.group(0) if m else 'NOT RUN'}")
for line in st.splitlines():
    if "forced" in line or "default choice" in line or "rms_norm fused" in line or line.startswith("FAIL"):
        print("  " + line)
pt = (out / "pytest_cuda.txt").read_text() if (out / "pytest_cuda.txt").exists() else ""
tail = [l for l in pt.splitlines() if re.search(r"\d+ (passed|failed|skipped)", l)]
print(f"PYTEST -m cuda: {tail[-1] if tail else 'NOT RUN'}")
EOF
echo "total $(( $(date +%s) - T0 ))s; files in $OUT" | tee -a "$SUMMARY"
grep -q -E "FAILED|TIMED OUT|SKIPPED \(budget\)" "$SUMMARY" && exit 1
exit 0
