#!/usr/bin/env bash
# `pip install <checkout>` as a user does it, run by ctest: a fresh virtualenv on
# Debian's python3 (with its site packages, so Debian's torch is seen), `pip install` of
# this source tree (scikit-build-core from the package index, the project built with
# CMake), then from that environment alone:
#   - `hvdrun` is on its PATH and prints its version;
#   - libhvdrun.so.0 is inside the installed package and hvdrun.torch loads it;
#   - `hvdrun -np 2 python` runs an hvdrun.torch allreduce and a DistributedOptimizer step;
#   - hvdrun.run from a plain Python process returns every rank's result.
# A second install of the same tree compiles nothing. Prints how long each install took. Usage: pip_test.sh SOURCE_DIR. Exit 77: skipped
# (no venv module, or no torch for Debian's python3).
set -euo pipefail
src=$1
py=/usr/bin/python3
fail() { echo "pip_test: $*" >&2; exit 1; }
skip() { echo "pip_test: skipped: $*"; exit 77; }

[[ -x $py ]] || skip "$py is missing"
$py -c 'import venv, ensurepip' 2>/dev/null || skip "python3-venv is not installed"
$py -c 'import torch' 2>/dev/null || skip "Debian's python3-torch is not installed"

work=$(mktemp -d "${TMPDIR:-/tmp}/hvdrun-pip-XXXXXX")
trap 'rm -rf "$work"' EXIT
# A copy of the tree without build directories, as a fresh checkout would be.
mkdir "$work/src"
tar -C "$src" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$work/src" -xf -

$py -m venv --system-site-packages "$work/venv"
start=$SECONDS
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "$work/src" >"$work/pip.log" 2>&1 ||
  { cat "$work/pip.log"; fail "pip install failed"; }
echo "pip_test: pip install took $((SECONDS - start)) s"
# The build stays in the tree (pyproject.toml's build-dir), so installing again compiles
# nothing, although scikit-build-core starts from a fresh CMake cache each time.
start=$SECONDS
"$work/venv/bin/pip" install -v --disable-pip-version-check "$work/src" >"$work/pip2.log" 2>&1 ||
  { cat "$work/pip2.log"; fail "the second pip install failed"; }
compiled=$(grep -c 'Building C' "$work/pip2.log" || true)
[[ $compiled == 0 ]] || { grep 'Building C' "$work/pip2.log"; fail "the second pip install compiled $compiled sources again"; }
echo "pip_test: a second pip install took $((SECONDS - start)) s and compiled nothing"

# Nothing of the build tree or the checkout may be needed from here on.
rm -rf "$work/src"
export PATH="$work/venv/bin:/usr/bin:/bin"
unset HVDRUN_LIBRARY HVDRUN_LAUNCHER PYTHONPATH
cd "$work"

[[ $(command -v hvdrun) == "$work/venv/bin/hvdrun" ]] || fail "hvdrun is not on the venv's PATH"
hvdrun --version | grep -q '^hvdrun [0-9]' || fail "hvdrun --version prints no version"
lib=$(python -c 'import hvdrun, os; print(os.path.dirname(hvdrun.__file__))')/lib/libhvdrun.so.0
[[ -f $lib ]] || fail "libhvdrun.so.0 is not inside the installed package ($lib)"

cat >"$work/train.py" <<'PY'
import torch
import hvdrun.torch as hvd

hvd.init()
t = torch.full((5,), float(hvd.rank() + 1))
total = hvd.allreduce(t, op=hvd.Sum)
assert total.tolist() == [3.0] * 5, total
torch.manual_seed(hvd.rank())
model = torch.nn.Linear(4, 2)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
model(torch.full((3, 4), float(hvd.rank()))).sum().backward()
opt.step()
w = hvd.allgather(model.weight.detach().reshape(1, -1))
assert torch.equal(w[0], w[1]), w
print(f"pip rank {hvd.rank()} ok")
PY
out=$(timeout 120 hvdrun -np 2 python "$work/train.py" 2>&1) || { echo "$out"; fail "hvdrun -np 2 python train.py failed"; }
echo "$out"
[[ $(grep -c 'pip rank [01] ok' <<<"$out") == 2 ]] || fail "expected both ranks to report ok"

out=$(timeout 120 python -c '
import hvdrun
def f(x):
    import hvdrun.torch as hvd
    hvd.init()
    return (hvd.rank(), x * hvd.size())
print("run:", hvdrun.run(f, args=(7,), np=2))
' 2>&1) || { echo "$out"; fail "hvdrun.run failed"; }
echo "$out"
grep -q 'run: \[(0, 14), (1, 14)\]' <<<"$out" || fail "hvdrun.run returned the wrong results"
echo "pip_test: ok"
