#!/bin/bash
# The pure layer's markers, audited: each test module's pure tests run in a fresh process of
# their own, where the autouse check of tests/conftest.py fails the first unmarked test that
# loads TensorFlow or starts a process. (In one shared run, a test that loads TensorFlow hides
# every later one in the same process.) Prints one line per test that fails; none: clean.
# Usage: bash scripts/audit_markers.sh   (about 4 minutes on 2 cores)
cd "$(dirname "$0")/.." || exit 1
PY=${PY:-.venv/bin/python}
status=0
for module in tests/test_*.py; do
  out=$(CI=true "$PY" -m pytest -p no:cacheprovider -q \
      -m "not tf and not process and not slow and not gpu" "$module" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then  # 5: every test of the module deselected
    echo "$out" | grep -E "^(ERROR|FAILED) " || echo "$module: $(echo "$out" | tail -1)"
    status=1
  fi
done
exit $status
