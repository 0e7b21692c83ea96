# syntax=docker/dockerfile:1
# Stage 1: export the shipped checkpoint to ONNX with the CPU build of torch (torch never reaches the runtime image).
FROM python:3.11-slim AS export
WORKDIR /src
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
# the dependencies from pyproject.toml alone, at the versions CI tested (constraints.txt), in a layer of their own:
# a change to the code reinstalls none of them
COPY pyproject.toml constraints.txt ./
RUN python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print(*p['dependencies'], *p['optional-dependencies']['torch'], sep='\n')" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt -c constraints.txt && rm /tmp/requirements.txt
COPY README.md LICENSE ./
COPY transduce ./transduce
RUN pip install --no-cache-dir --no-deps .
# float32 (exact), int8 (CPU: 1.3-1.6x the throughput, outputs differ slightly) or float16 (GPU): see README
ARG MODEL_DTYPE=float32
# int8 weights in 7 bits: the image runs on CPUs with and without VNNI (without it, 8-bit weights saturate; README)
ARG INT8_WEIGHT_BITS=7
RUN TRANSDUCE_INT8_WEIGHT_BITS=${INT8_WEIGHT_BITS} \
    transduce export transduce/weights/default/checkpoint.pt /opt/transduce/model --dtype ${MODEL_DTYPE}

# Stage 2: the serving image: CUDA 13 + cuDNN 9 runtime, onnxruntime-gpu (falls back to CPU), no torch, no compilers.
FROM nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04 AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv curl \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
WORKDIR /app
# the dependencies first (onnxruntime-gpu, fastapi, ...; no extras), from pyproject.toml alone, at the versions CI
# tested (constraints.txt): a code change rebuilds only the layers from the code's COPY on
COPY pyproject.toml constraints.txt ./
RUN python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print(*p['dependencies'], sep='\n')" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt -c constraints.txt && rm /tmp/requirements.txt
COPY README.md LICENSE ./
# only what serving imports: the command line, the engine and the service (no model, export or training code);
# translate_cli.py is the client side (`docker run IMAGE translate --url ...`), torch-free like the rest
COPY transduce/__init__.py transduce/__main__.py transduce/cli.py transduce/serve_cli.py transduce/health_cli.py \
     transduce/translate_cli.py \
     transduce/translate_local.py transduce/translate_remote.py \
     transduce/shipped.py transduce/paths.py transduce/tokenizer.py ./transduce/
COPY transduce/engine ./transduce/engine
COPY transduce/service ./transduce/service
RUN pip install --no-cache-dir --no-deps . && useradd --create-home --uid 10001 transduce
COPY --from=export /opt/transduce/model /models/default
USER 10001:10001
ENV TRANSDUCE_MODEL_DIR=/models/default TRANSDUCE_HOST=0.0.0.0 TRANSDUCE_PORT=5000 TRANSDUCE_DEVICE=auto
EXPOSE 5000
# readiness on the port of TRANSDUCE_PORT, with the first API key (of TRANSDUCE_API_KEYS, else of the key file)
# when TRANSDUCE_PROTECT_HEALTH asks health callers for one; see `transduce health --help`
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 CMD ["transduce", "health"]
# SIGTERM starts draining: readiness goes 503, accepted requests finish within TRANSDUCE_SHUTDOWN_GRACE_S.
STOPSIGNAL SIGTERM
ENTRYPOINT ["transduce", "serve"]
