# Groundwork image: `groundwork worker` by default; the compose file also runs `groundwork db migrate`
# and `groundwork serve` (the trigger service). tests/unit/test_image_contents.py checks that
# every package pyproject.toml ships is copied here and let through .dockerignore.
# Build context is the project root; .dockerignore lets in only what is copied below.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    OPENAI_AGENTS_DISABLE_TRACING=1

RUN useradd --create-home --uid 10001 --user-group groundwork

WORKDIR /opt/groundwork/src

# Dependencies first, in their own layer: rebuilt only when pyproject.toml changes.
COPY pyproject.toml README.md ./
RUN pip install . && pip uninstall --yes groundwork

COPY contracts/ contracts/
COPY workflows/ workflows/
COPY activities/ activities/
COPY adapters/ adapters/
COPY workers/ workers/
COPY definitions/ definitions/
COPY cli/ cli/
COPY trigger/ trigger/
RUN pip install --no-deps . && rm -rf build ./*.egg-info

ENV GROUNDWORK_HOME=/home/groundwork/.groundwork

USER 10001:10001
WORKDIR /home/groundwork
ENTRYPOINT ["groundwork"]
CMD ["worker"]
