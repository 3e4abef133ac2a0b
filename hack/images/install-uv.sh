#!/bin/sh
# uv for an image build: the one bootstrap that sandbox-image/Dockerfile, operator/Dockerfile and
# trainer/Dockerfile COPY and run. A venv at /opt/uv holding uv from PyPI, at the version
# hack/versions.env pins for the host. Each image's later `uv sync`/`uv pip` calls use it and read
# their settings from the Dockerfile's ENV UV_* line. hack/build-images.sh hashes every file a COPY
# line names, so a change here rebuilds all three images.
# A CA bundle lent as the build secret "ca" (networks that intercept TLS) reaches pip.
set -eu
if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca; fi
python3.11 -m venv /opt/uv
/opt/uv/bin/pip install -q uv==0.13.8
