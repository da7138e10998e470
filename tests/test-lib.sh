# Shared by the shell tests: `source` it after setting TEST_NAME.
#
# fail MESSAGE: says which check failed ($CHECK) and exits 1.
# show FILE...: prints files (a run's output) to stderr, for the failure log.
CHECK="(none yet)"
fail() {
  echo "$TEST_NAME: FAIL [$CHECK]: $*" >&2
  exit 1
}
show() {
  local f
  for f in "$@"; do
    echo "--- $(basename "$f"):" >&2
    cat "$f" >&2 || true
  done
}
