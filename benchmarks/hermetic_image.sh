#!/usr/bin/env bash
# A CUDA env's image made from its lock alone (issue 43), step by step, each step timed: the base
# from its recipe (debootstrap), the lock's artifacts into the store, the cold build, the no-op
# rebuild; then, in the image, what the lock promises: `verify-env --image --exact` (every file
# hashed in a container against the store's wheels), torch and its CUDA, the toolchain's nvcc
# as CUDA_HOME, and a small CUDA extension compiled for sm_90a in a build stage (no GPU, no
# network); for an env whose toolchain is build-only (FlashMLA's), each source built in the image
# instead: it imports, its extension's arches, the wheel's hash. Sizes at the end. Results under
# OUT (steps.txt, one NAME.txt per step).
#   benchmarks/hermetic_image.sh ENV OUT [ENV2]   ENV2: a second env, for what the two share
#   SUBSTITUTE=NAME benchmarks/hermetic_image.sh ...   over the envs' declared substitute base NAME
#   (its closure, locks/ENV/substitutes/NAME.json; --substitute-base NAME on every command)
set -u
env=$1 out=$2 second=${3:-}
substitute=${SUBSTITUTE:-}
asked=()
lock_file=lock.json
if [ -n "$substitute" ]; then
    asked=(--substitute-base "$substitute")
    lock_file="substitutes/$substitute.json"
fi
mkdir -p "$out"
out=$(realpath "$out")
steps=$out/steps.txt
source "$(dirname "$0")/../scripts/gpu/steps.sh"
ea=".venv/bin/envaudit"
lock_field() {  # lock_field ENV EXPRESSION-OVER-lock
    .venv/bin/python -c "import json, sys; lock = json.load(open(sys.argv[1])); print($2)" \
        "locks/$1/$lock_file"
}
tag_of() {
    echo "envaudit/$1:$(lock_field "$1" "lock['closure_hash'][:16]")${substitute:+-over-$substitute}"
}
recipe=$(lock_field "$env" "lock['base']['recipe']")
tag=$(tag_of "$env")
step base "$ea" base build "$recipe"
step fetch "$ea" fetch "$env" "${asked[@]}"
step build "$ea" build --env "$env" "${asked[@]}"
step rebuild "$ea" build --env "$env" "${asked[@]}"
step verify "$ea" verify-env "$env" "${asked[@]}" --image "$tag" --exact
step torch docker run --rm --network none "$tag" python -c \
    'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())'
build_only=$(lock_field "$env" "bool((lock.get('cuda') or {}).get('build_only'))")
if [ "$build_only" = True ]; then
    # A build-only toolchain stays in the build stages: the image has the sources' built
    # packages, not nvcc. Each source built in the image: its module imports, the arches its
    # extension names, and the wheel the build stage made, hashed (a lock made without
    # building records none to compare it with).
    for source in $(lock_field "$env" "' '.join(s['name'] for s in lock['sources'])"); do
        step "source-$source" docker run --rm -i --network none "$tag" python - "$source" <<'EOF'
import importlib.metadata as md
import re
import sys

name = sys.argv[1]
dist = next(d for d in md.distributions() if d.metadata["Name"].replace("_", "-") == name)
print(dist.metadata["Name"], dist.version)
for library in [f for f in dist.files or [] if str(f).endswith(".so")]:
    data = open(library.locate(), "rb").read()
    arches = sorted({m.decode() for m in re.findall(rb"-arch[ =](sm_[0-9]+a?)", data)})
    print(library, f"{len(data) / 1e6:.1f} MB", "cubin arches:", arches)
EOF
        # the classic builder keeps each stage's result as an untagged image: the build
        # stage's is the one holding /out/<wheel>, and the toolchain that made it
        for image in $(docker images -a -q --filter dangling=true); do
            docker run --rm --network none --entrypoint sh "$image" -c \
                'ls /out/*.whl >/dev/null 2>&1 && sha256sum /out/*.whl && ls -l /out/*.whl \
                 && echo "CUDA_HOME=$CUDA_HOME" && "$CUDA_HOME/bin/nvcc" --version | grep release' \
                2>/dev/null
        done | sort -u | tee "$out/built-wheel-$source.txt" | tee -a "$steps"
    done
    docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^(envaudit-base/$recipe|${tag%%:*}):" \
        | tee -a "$steps"
    df -h / | tail -1 | tee -a "$steps"
    exit 0
fi
step nvcc docker run --rm --network none "$tag" sh -c 'echo "CUDA_HOME=$CUDA_HOME"; "$CUDA_HOME/bin/nvcc" --version'
# The extension: one kernel and its binding, compiled by torch.utils.cpp_extension in a build
# stage of the env's image; the .so's embedded cubin must say sm_90a.
ext=$(mktemp -d)
cat >"$ext/Dockerfile" <<EOF
FROM $tag AS extension
ENV TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=2 TORCH_EXTENSIONS_DIR=/tmp/ext
COPY build.py /tmp/build.py
RUN python /tmp/build.py
EOF
cat >"$ext/build.py" <<'EOF'
import glob
import re
import time

from torch.utils.cpp_extension import load_inline

CUDA = """
#include <torch/extension.h>
__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    twice<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
started = time.monotonic()
load_inline("twice", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=CUDA,
            functions=["run"], verbose=False)
(library,) = glob.glob("/tmp/ext/twice/*.so")
arches = sorted({m.decode() for m in re.findall(rb"-arch (sm_[0-9a-z]+)", open(library, "rb").read())})
print(f"built {library} in {time.monotonic() - started:.1f} s; cubin arches: {arches}")
assert arches == ["sm_90a"], arches
EOF
step extension docker build --network none --no-cache -t "$tag-extension-check" "$ext"
docker rmi "$tag-extension-check" >/dev/null 2>&1
rm -rf "$ext"
docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^(envaudit-base/$recipe|${tag%%:*}):" \
    | tee -a "$steps"
docker history --format '{{.Size}}\t{{.CreatedBy}}' "$tag" | cut -c1-160 >"$out/history.txt"
if [ -n "$second" ]; then
    tag2=$(tag_of "$second")
    step fetch2 "$ea" fetch "$second" "${asked[@]}"
    step build2 "$ea" build --env "$second" "${asked[@]}"
    # layers the two images hold in common (by content digest) and their size on disk once
    .venv/bin/python - "$tag" "$tag2" <<'EOF' | tee -a "$steps"
import json, subprocess, sys
def layers(tag):
    info = json.loads(subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=True).stdout)[0]
    return info["RootFS"]["Layers"], info["Size"]
(a, size_a), (b, size_b) = layers(sys.argv[1]), layers(sys.argv[2])
print(f"shared layers: {len(set(a) & set(b))} of {len(a)} and {len(b)}; images {size_a/1e9:.2f} GB and {size_b/1e9:.2f} GB")
EOF
    # the engine's own account: what of each image is shared with another, what is its own
    docker system df -v | grep -E "^(REPOSITORY|${tag%%:*} |${tag2%%:*} )" | tee -a "$steps"
fi
df -h / | tail -1 | tee -a "$steps"
