# Sourced by the GPU scripts that run envaudit from this checkout on the machine's own Python:
# installs the carried scratch/gpu-wheels (envaudit's Python deps the machine lacks: made here by
# `python scripts/gpu/carry.py wheels scratch/gpu-wheels`) under SCRATCH (default
# /root/ea) and exports PYTHONPATH, ENVAUDIT_CACHE and the first GPU's UUID as `uuid`.
scratch=${SCRATCH:-/root/ea}
mkdir -p "$scratch"
python3 -m pip install --quiet --no-deps --no-index --target "$scratch/pylib" scratch/gpu-wheels/*.whl \
  2>>"$scratch/pip.txt"
export PYTHONPATH=$PWD/src:$scratch/pylib PYTHONUNBUFFERED=1 ENVAUDIT_CACHE=$scratch/cache
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
