# envaudit image of sample, closure 8f6272852375000f04541822957ba9394829221bdd9460ccbbb1ba3e6b178969
# Generated from lock.json by `envaudit build`; every artifact is installed by hash
# from the build context, and the build runs with no network.

FROM envaudit-base/noble-minbase:bbbbbbbbbbbbbbbb AS installer
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' \
 && python3 -m venv /opt/envaudit/installer

# layer torch-stack: 3 wheels (torch==2.11.0, triton==3.6.0, nvidia-cublas==13.1.0.3)
FROM installer AS layer-torch-stack
COPY wheels/torch-stack/ /tmp/wheels/
RUN python3 -m venv --without-pip /opt/envaudit/venv \
 && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt

# layer packages: 2 wheels (numpy==2.5.2, safetensors==0.8.0)
FROM installer AS layer-packages
COPY wheels/packages/ /tmp/wheels/
RUN python3 -m venv --without-pip /opt/envaudit/venv \
 && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt

# the CUDA toolchain (nvidia-cuda-nvcc==13.3.73, nvidia-cuda-runtime==13.3.29), a prefix of its own, not on the run-time path
FROM installer AS cuda-toolchain
COPY wheels/cuda-toolchain/ /tmp/wheels/
RUN /opt/envaudit/installer/bin/pip install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location --target /opt/envaudit/toolchain \
    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt \
 && home=$(ls -d /opt/envaudit/toolchain/nvidia/cu1*) \
 && for so in "$home"/lib/lib*.so.[0-9]*; do v=${so##*.so.}; case $v in *[!0-9]*) continue;; esac; [ -e "${so%.so.*}.so" ] || ln -s "${so##*/}" "${so%.so.*}.so"; done \
 && if [ ! -e "$home/lib64" ]; then ln -s lib "$home/lib64"; fi

# source build of flash-mla: rev 9241ae3ef9bac614dd25e45e507e089f888280e0, csrc/cutlass at 147f5673d0c1c3dcf66f78d677fd647e4a020219
FROM installer AS build-flash-mla
COPY wheels/build-flash-mla/ /tmp/wheels/
RUN python3 -m venv --without-pip /opt/envaudit/venv \
 && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt
COPY --from=cuda-toolchain /opt/envaudit/toolchain/ /opt/envaudit/toolchain/
RUN mkdir -p $(dirname /opt/cuda) && ln -s $(ls -d /opt/envaudit/toolchain/nvidia/cu1*) /opt/cuda
ADD sources/flash-mla.tar /src/flash-mla/
ENV SOURCE_DATE_EPOCH="315532800" CUDA_HOME="/opt/cuda" CPLUS_INCLUDE_PATH="/opt/cuda/include/cccl" TORCH_CUDA_ARCH_LIST="9.0a" FLASH_MLA_DISABLE_SM100="1" FLASH_MLA_SKIP_REG_SPILL_CHECK="1"
RUN cd /src/flash-mla && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python wheel --no-deps --no-build-isolation --no-index --no-cache-dir --disable-pip-version-check -w /out . > /build.log 2>&1 || { tail -n 60 /build.log; exit 1; }

FROM installer AS layer-built-flash-mla
COPY --from=build-flash-mla /out/ /tmp/wheels/
RUN python3 -m venv --without-pip /opt/envaudit/venv \
 && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python install --no-index --no-deps --no-cache-dir --disable-pip-version-check /tmp/wheels/*.whl

# the environment sample
FROM envaudit-base/noble-minbase:bbbbbbbbbbbbbbbb
COPY --from=layer-torch-stack /opt/envaudit/venv/ /opt/envaudit/venv/
COPY --from=layer-packages /opt/envaudit/venv/ /opt/envaudit/venv/
COPY --from=layer-built-flash-mla /opt/envaudit/venv/ /opt/envaudit/venv/
COPY --from=cuda-toolchain /opt/envaudit/toolchain/ /opt/envaudit/toolchain/
RUN mkdir -p $(dirname /opt/cuda) && ln -s $(ls -d /opt/envaudit/toolchain/nvidia/cu1*) /opt/cuda
ENV PATH="/opt/envaudit/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    VIRTUAL_ENV="/opt/envaudit/venv" \
    CUDA_HOME="/opt/cuda" \
    PYTHONPATH="/opt/envaudit/harness" \
    PYTHONNOUSERSITE="1" \
    PYTHONDONTWRITEBYTECODE="1" \
    HOME="/tmp/home" \
    OMP_NUM_THREADS="2"
RUN ["/opt/envaudit/venv/bin/python", "-c", "import sys; print(sys.version)"]
USER 10001:10001
WORKDIR /tmp
