# envaudit image of torch-cpu, closure c38efd341a7168e11a8eaf0531a1a4176a1c719352edc82bf55efd7c2af71bbd
# Generated from lock.json by `envaudit build`; every artifact is installed by hash
# from the build context, and the build runs with no network.

FROM envaudit-base/bookworm-minbase:635d2b82f604fd0a AS installer
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
 && python3 -m venv /opt/envaudit/installer

# layer torch-stack: 1 wheels (torch==2.13.0+cpu)
FROM installer AS layer-torch-stack
COPY wheels/torch-stack/ /tmp/wheels/
RUN python3 -m venv --without-pip /opt/envaudit/venv \
 && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt

# layer packages: 11 wheels (filelock==4.3.1, fsspec==2026.9.0, jinja2==3.1.6, markupsafe==3.0.4, mpmath==1.3.0, networkx==3.6.1 and 5 more)
FROM installer AS layer-packages
COPY wheels/packages/ /tmp/wheels/
RUN python3 -m venv --without-pip /opt/envaudit/venv \
 && /opt/envaudit/installer/bin/pip --python /opt/envaudit/venv/bin/python install --no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt

# the environment torch-cpu
FROM envaudit-base/bookworm-minbase:635d2b82f604fd0a
COPY --from=layer-torch-stack /opt/envaudit/venv/ /opt/envaudit/venv/
COPY --from=layer-packages /opt/envaudit/venv/ /opt/envaudit/venv/
ENV PATH="/opt/envaudit/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    VIRTUAL_ENV="/opt/envaudit/venv" \
    PYTHONPATH="/opt/envaudit/harness" \
    PYTHONNOUSERSITE="1" \
    PYTHONDONTWRITEBYTECODE="1" \
    HOME="/tmp/home" \
    OMP_NUM_THREADS="2"
RUN ["/opt/envaudit/venv/bin/python", "-c", "import sys; print(sys.version)"]
USER 10001:10001
WORKDIR /tmp
