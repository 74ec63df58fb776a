# envaudit image of flashmla-13.3, closure dccf9278fb9c07a1829cf093589826fd46a890b63e62fef7c1ab5332b248fe8a
# Generated from lock.json by `envaudit build`; every artifact is installed by hash
# from the build context, and the build runs with no network.
# Over a substitute base trixie-devbase for the declared recipe noble-devbase, Python 3.13 for 3.12, asked for with `--substitute-base trixie-devbase`: this closure is substitutes/trixie-devbase.json.

FROM envaudit-base/trixie-devbase:57f89c4171372db5 AS installer
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 13), sys.version' \
 && python3 -m venv /opt/envaudit/installer

# layer torch-stack: 17 wheels (nvidia-cublas==13.1.0.3, nvidia-cuda-cupti==13.0.85, nvidia-cuda-nvrtc==13.0.88, nvidia-cuda-runtime==13.0.96, nvidia-cudnn-cu13==9.19.0.56, nvidia-cufft==12.0.0.61 and 11 more)
FROM installer AS layer-torch-stack
COPY wheels/torch-stack/ /tmp/wheels/
RUN python3 -m venv --without-pip /opt/envaudit/venv \
 && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt

# layer packages: 15 wheels (cuda-bindings==13.3.1, cuda-pathfinder==1.8.1, cuda-toolkit==13.0.2, filelock==3.32.5, fsspec==2026.7.0, jinja2==3.1.6 and 9 more)
FROM installer AS layer-packages
COPY wheels/packages/ /tmp/wheels/
RUN python3 -m venv --without-pip /opt/envaudit/venv \
 && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt

# the CUDA toolchain (nvidia-cublas==13.1.0.3, nvidia-cuda-cccl==13.3.3.4.1, nvidia-cuda-crt==13.3.73, nvidia-cuda-nvcc==13.3.73, nvidia-cuda-runtime==13.3.29, nvidia-curand==10.4.0.35, nvidia-cusolver==12.0.4.66, nvidia-cusparse==12.6.3.3, nvidia-nvjitlink==13.0.88, nvidia-nvvm==13.3.73), a prefix of its own, not on the run-time path
FROM installer AS cuda-toolchain
COPY wheels/cuda-toolchain/ /tmp/wheels/
COPY wheels/torch-stack/nvidia_cublas-13.1.0.3-py3-none-manylinux_2_27_x86_64.whl \
    wheels/torch-stack/nvidia_curand-10.4.0.35-py3-none-manylinux_2_27_x86_64.whl \
    wheels/torch-stack/nvidia_cusolver-12.0.4.66-py3-none-manylinux_2_27_x86_64.whl \
    wheels/torch-stack/nvidia_cusparse-12.6.3.3-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl \
    wheels/torch-stack/nvidia_nvjitlink-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl \
    /tmp/wheels/
RUN /opt/envaudit/installer/bin/pip install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location --target /opt/envaudit/toolchain \
    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt \
 && home=$(ls -d /opt/envaudit/toolchain/nvidia/cu1*) \
 && for so in "$home"/lib/lib*.so.[0-9]*; do v=${so##*.so.}; case $v in *[!0-9]*) continue;; esac; [ -e "${so%.so.*}.so" ] || ln -s "${so##*/}" "${so%.so.*}.so"; done \
 && if [ ! -e "$home/lib64" ]; then ln -s lib "$home/lib64"; fi

# source build of flash-mla: rev 9241ae3ef9bac614dd25e45e507e089f888280e0, csrc/cutlass at 147f5673d0c1c3dcf66f78d677fd647e4a020219
# its build requirements hold the layer torch-stack whole: the stage starts from it and adds 15 wheel(s)
FROM layer-torch-stack AS build-flash-mla
COPY wheels/build-flash-mla/ /tmp/build-requires/
COPY wheels/packages/cuda_bindings-13.3.1-cp313-cp313-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl \
    wheels/packages/cuda_pathfinder-1.8.1-py3-none-any.whl \
    wheels/packages/cuda_toolkit-13.0.2-py2.py3-none-any.whl \
    wheels/packages/filelock-3.32.5-py3-none-any.whl \
    wheels/packages/fsspec-2026.7.0-py3-none-any.whl \
    wheels/packages/jinja2-3.1.6-py3-none-any.whl \
    wheels/packages/markupsafe-3.0.3-cp313-cp313-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl \
    wheels/packages/mpmath-1.3.0-py3-none-any.whl \
    wheels/packages/networkx-3.6.1-py3-none-any.whl \
    wheels/packages/setuptools-81.0.0-py3-none-any.whl \
    wheels/packages/sympy-1.14.0-py3-none-any.whl \
    wheels/packages/typing_extensions-4.16.0-py3-none-any.whl \
    /tmp/build-requires/
RUN /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    --find-links /tmp/build-requires -r /tmp/build-requires/requirements.txt && rm -rf /tmp/build-requires
COPY --from=cuda-toolchain /opt/envaudit/toolchain/ /opt/envaudit/toolchain/
RUN mkdir -p $(dirname /opt/cuda) && ln -s $(ls -d /opt/envaudit/toolchain/nvidia/cu1*) /opt/cuda
ADD sources/flash-mla.tar /src/flash-mla/
ENV SOURCE_DATE_EPOCH="315532800" CUDA_HOME="/opt/cuda" CPLUS_INCLUDE_PATH="/opt/cuda/include/cccl" TORCH_CUDA_ARCH_LIST="9.0a" FLASH_MLA_DISABLE_SM100="1" FLASH_MLA_SKIP_REG_SPILL_CHECK="1" NVCC_THREADS="8"
RUN cd /src/flash-mla && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python wheel --no-deps --no-build-isolation --no-index --no-cache-dir --disable-pip-version-check -w /out . > /build.log 2>&1 || { tail -n 60 /build.log; exit 1; }

FROM installer AS layer-built-flash-mla
COPY --from=build-flash-mla /out/ /tmp/wheels/
RUN python3 -m venv --without-pip /opt/envaudit/venv \
 && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python install --no-index --no-deps --no-cache-dir --disable-pip-version-check /tmp/wheels/*.whl

# the environment flashmla-13.3
FROM envaudit-base/trixie-devbase:57f89c4171372db5
COPY --from=layer-torch-stack /opt/envaudit/venv/ /opt/envaudit/venv/
COPY --from=layer-packages /opt/envaudit/venv/ /opt/envaudit/venv/
COPY --from=layer-built-flash-mla /opt/envaudit/venv/ /opt/envaudit/venv/
ENV PATH="/opt/envaudit/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    VIRTUAL_ENV="/opt/envaudit/venv" \
    PYTHONPATH="/opt/envaudit/harness" \
    PYTHONNOUSERSITE="1" \
    PYTHONDONTWRITEBYTECODE="1" \
    HOME="/tmp/home"
RUN ["/opt/envaudit/venv/bin/python", "-c", "import sys; print(sys.version)"]
USER 10001:10001
WORKDIR /tmp
