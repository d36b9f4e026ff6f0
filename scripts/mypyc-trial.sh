#!/usr/bin/env bash
# Compile the serving path's modules with mypyc into a copy of the package, to measure
# them compiled (docs/benchmarks.md, "Sixth pass"). The copy is DIR (default
# var/mypyc-trial); then, e.g.:
#   PYTHONPATH=var/mypyc-trial .venv/bin/python -m bench.throughput --quick --rounds 2
# mypyc builds C extensions: it needs a C compiler and the Python headers.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-var/mypyc-trial}
rm -rf "$out"
mkdir -p "$out"
cp -r service/dynagent "$out/"
# mypyc's build reads the pyproject.toml of the folder it runs in: none there.
printf '[mypy]\npython_version = 3.11\nignore_missing_imports = True\n' > "$out/mypy.ini"
# The path's modules that mypyc accepts: it does not implement async generators (the
# streaming path, the run's entry), and events.py keeps a hidden slot it cannot.
modules=(
  runtime/_redaction runtime/_costs deadlines models/_answers core/traces runtime/_loop
  core/routing models/_endpoint http/openai/options http/openai/answer http/runs http/sse
  http/middleware/front http/api/bodies core/metrics core/spend core/called
  registry/rollouts core/series interceptors/base
)
files=()
for module in "${modules[@]}"; do files+=("dynagent/$module.py"); done
root=$PWD
cd "$out"
"$root/.venv/bin/mypyc" "${files[@]}" > build.log 2>&1 || { tail -20 build.log; exit 1; }
echo "compiled $(find dynagent -name '*.so' | wc -l) modules into $out"
