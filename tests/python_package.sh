#!/usr/bin/env bash
# The Python package as its users install it: a venv on Debian's python3 (with the system's numpy),
# `pip install` offline from the checkout, then the Python tests run against the installed copy
# from another directory (never the source tree, never $REWIND_LIBRARY).
#   bash tests/python_package.sh [BUILD_DIR]
# BUILD_DIR (default build): an existing CMake build whose rewind_c the package takes, so that
# nothing is compiled twice; without one the package's own build compiles rewind_c alone.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build}
venv=$build/python-venv
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
REWIND_CMAKE_BUILD_DIR="$root/$build" "$venv/bin/pip" install --quiet --no-build-isolation --no-index "$root/apps/python"
py=$root/$venv/bin/python
shared=$(cd "$root/.." && pwd)/shared
cd /
env -u REWIND_LIBRARY "$py" -c 'import rewind, sys; print("rewind", rewind.version(), "installed at", rewind.__file__)'
# The CLI, when this build has it, makes test models and is compared with generate().
cli=()
[ -x "$root/$build/bin/rewind" ] && cli=(REWIND_CLI="$root/$build/bin/rewind")
for t in test_rewind.py test_hf.py; do
  env -u REWIND_LIBRARY REWIND_TEST_INSTALLED=1 REWIND_SHARED_DIR="$shared" "${cli[@]}" "$py" "$root/apps/python/$t"
done
# The README's Python example, as a transformers user runs it: from the checkout, the installed package.
cd "$root"
readme_example=$(/usr/bin/python3 - "$root/README.md" <<'PY'
import sys
doc = open(sys.argv[1], encoding="utf-8").read()
block = doc[doc.index("<!-- the README's Python example"):]
block = block[block.index("```python\n") + len("```python\n"):]
print(block[: block.index("```\n")], end="")
PY
)
echo "== the README's Python example"
env -u REWIND_LIBRARY "$py" -c "$readme_example"
