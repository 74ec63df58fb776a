# envaudit image of sample, closure 040604d3bf5e47a841f11258f0a6cedc4fb977b683934db24ff81834b2922948, over the imported stack gpu-host-stack
# the stack holds 4 of the lock's 5 packages at the locked versions; 1 are added below
FROM envaudit-base/gpu-host-stack:0123
RUN ["/opt/torch/.venv/bin/python", "-c", "import compileall, sysconfig\npaths = sysconfig.get_paths()\nfor folder in sorted({paths['stdlib'], paths['purelib'], paths['platlib']}):\n    compileall.compile_dir(folder, quiet=2, workers=0)\n"]
COPY wheels/added/ /tmp/wheels/
RUN /opt/torch/.venv/bin/python -m pip install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location --find-links /tmp/wheels -r /tmp/wheels/requirements.txt && rm -rf /tmp/wheels
COPY wheels/toolchain/ /tmp/wheels/toolchain/
RUN /opt/torch/.venv/bin/python -m pip install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location --target /opt/envaudit/toolchain \
    --find-links /tmp/wheels/toolchain -r /tmp/wheels/toolchain/requirements.txt \
 && home=$(ls -d /opt/envaudit/toolchain/nvidia/cu1*) \
 && for so in "$home"/lib/lib*.so.[0-9]*; do v=${so##*.so.}; case $v in *[!0-9]*) continue;; esac; [ -e "${so%.so.*}.so" ] || ln -s "${so##*/}" "${so%.so.*}.so"; done \
 && if [ ! -e "$home/lib64" ]; then ln -s lib "$home/lib64"; fi \
 && rm -rf /tmp/wheels/toolchain && mkdir -p $(dirname /opt/cuda) && ln -s $(ls -d /opt/envaudit/toolchain/nvidia/cu1*) /opt/cuda
ENV PATH="/opt/torch/.venv/bin:/opt/cuda/bin:/opt/gcc/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    VIRTUAL_ENV="/opt/torch/.venv" \
    LD_LIBRARY_PATH="/usr/local/nvidia/lib64" \
    PYTHONPATH="/opt/envaudit/harness" \
    PYTHONNOUSERSITE="1" \
    PYTHONDONTWRITEBYTECODE="1" \
    HOME="/tmp/home" \
    OMP_NUM_THREADS="2" \
    CUDA_HOME="/opt/cuda"
RUN ["/opt/torch/.venv/bin/python", "-c", "import sys; print(sys.version)"]
RUN mkdir -p /tmp /var/tmp && chmod 1777 /tmp /var/tmp
USER 10001:10001
WORKDIR /tmp
