#!/usr/bin/env bash
# The conformance gate: install the backend, run Glow Kit's conformance suite on it, keep the HTML report.
# Exit status is the suite's: non-zero on any failure (and on a known failure that started passing).
# Usage: ci/conformance.sh [extra pytest args]     (BOARDS=4 runs four workers: one per board)
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --no-deps -e .
glowc backends
python -m pytest -q tests
mkdir -p reports
glowc conformance --backend {{ cookiecutter.backend_name }} -n "${BOARDS:-2}" \
    --conformance-report=reports/report.html "$@"
echo "conformance report: reports/report.html"
