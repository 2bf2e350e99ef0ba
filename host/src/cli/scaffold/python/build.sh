#!/bin/sh
# Builds {{file}}.wasm from app.py against wit/ (world `task`).
# The first run creates .venv and installs the pinned componentize-py from
# PyPI (requirements.txt); set COMPONENTIZE_PY to use one installed elsewhere.
set -eu
cd "$(dirname "$0")"
if [ -z "${COMPONENTIZE_PY:-}" ]; then
    if [ ! -x .venv/bin/componentize-py ]; then
        python3 -m venv .venv
        .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
    fi
    COMPONENTIZE_PY=.venv/bin/componentize-py
fi
"$COMPONENTIZE_PY" -d wit -w task componentize app -o {{file}}.wasm
