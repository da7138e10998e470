#!/usr/bin/env bash
# CTest: the osprey command against real server processes.
#
#   bash tests/osprey-cli-test.sh SECTION OSPREY TEST_SERVER RPC_BENCH SOURCE_DIR
#
# SECTION is one of:
#   reflection  list, describe and call with the types from the server
#               (test_server --reflection): JSON and text format, the
#               request from the argument, a file and standard input, --user,
#               --repeat's summary
#   proto       the types from .proto files: rpc-bench's own, which uses
#               Kudu's method options, against rpc-bench -server_only; .proto
#               files that do not load
#   sidecars    sidecars both ways (Echo with echo_sidecars), byte for byte
#   errors      every error a person can make or meet, with its message and
#               exit code (1: the call failed, 2: usage)
#   tls         TLS as rpc-bench takes it, a CA file that does and one that
#               does not sign the server's certificate
#   completion  the bash completion against each subcommand's --help
# Any failure names the check that failed. Servers are this script's own,
# ended by PID.
set -euo pipefail

SECTION="${1:?usage: osprey-cli-test.sh SECTION OSPREY TEST_SERVER RPC_BENCH SOURCE_DIR}"
OSPREY="${2:?}"
TEST_SERVER="${3:?}"
RPC_BENCH="${4:?}"
SRC="${5:?}"
CALL_LIMIT=30  # seconds any one osprey run may take before it is a failure

TMP="$(mktemp -d "${TMPDIR:-/tmp}/osprey-cli-test.XXXXXX")"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

TEST_NAME="osprey-cli-test $SECTION"
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh"

# start NAME PATTERN COMMAND...: runs COMMAND in the background and waits
# (10 s at most) for a line of its stdout matching PATTERN ("listening on
# ADDR" or "Listening on ADDR"); sets ADDR.
start() {
  local name="$1" pattern="$2"
  shift 2
  : >"$TMP/$name.out"  # the job may open it after the loop first reads it
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  PIDS+=($!)
  local i
  for ((i = 0; i < 200; i++)); do
    ADDR="$(sed -n "s/^$pattern //p" "$TMP/$name.out" | head -1)"
    [[ -n "$ADDR" ]] && return 0
    kill -0 "${PIDS[-1]}" 2>/dev/null || break
    sleep 0.05
  done
  show "$TMP/$name.out" "$TMP/$name.err"
  fail "$name did not start"
}

# osp ARGS...: runs osprey; its stdout in $OUT, stderr in $ERR, status in $RC
# (OSPREY_CLI_TEST_VERBOSE=1 also shows each stderr).
osp() {
  set +e
  timeout "$CALL_LIMIT" "$OSPREY" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  RC=$?
  [[ -z "${OSPREY_CLI_TEST_VERBOSE:-}" ]] || cat "$TMP/err" >&2
  set -e
  OUT="$(cat "$TMP/out")"
  ERR="$(cat "$TMP/err")"
  [[ $RC != 124 ]] || fail "osprey $* did not finish within $CALL_LIMIT s"
}
expect_rc() {
  [[ $RC == "$1" ]] || fail "exit code $RC, expected $1; stdout: $OUT; stderr: $ERR"
}
expect_out() {
  grep -qF -- "$1" <<<"$OUT" || fail "stdout lacks '$1': $OUT (stderr: $ERR)"
}
expect_err() {
  grep -qF -- "$1" <<<"$ERR" || fail "stderr lacks '$1': $ERR (stdout: $OUT)"
}
# One line on stderr for an error, the "osprey: " one (the usage errors of
# the command line parser have their own two-line form).
expect_one_error_line() {
  [[ "$(grep -c '^osprey: ' <<<"$ERR")" == 1 ]] || fail "not one 'osprey:' line: $ERR"
}

CALC=osprey.rpc_test.CalculatorService
KCALC=kudu.rpc_test.CalculatorService

section_reflection() {
  start server "listening on" "$TEST_SERVER" 0 --reflection
  local a="$ADDR"

  CHECK="list names every service and method, one line each"
  osp list "$a"
  expect_rc 0
  expect_out "service $CALC {"
  expect_out "  rpc Add(osprey.rpc_test.AddRequestPB) returns (osprey.rpc_test.AddResponsePB);"
  expect_out "  rpc WhoAmI(osprey.rpc_test.WhoAmIRequestPB) returns (osprey.rpc_test.WhoAmIResponsePB);"
  expect_out "service osprey.reflection.ServerReflection {"

  CHECK="describe a service, a method, a message"
  osp describe "$a" "$CALC"
  expect_rc 0
  expect_out "// $CALC, in "
  expect_out "service CalculatorService {"
  expect_out "rpc Echo(.osprey.rpc_test.EchoRequestPB) returns (.osprey.rpc_test.EchoResponsePB);"
  osp describe "$a" "$CALC.Sleep"
  expect_rc 0
  expect_out "rpc Sleep(.osprey.rpc_test.SleepRequestPB) returns (.osprey.rpc_test.SleepResponsePB);"
  osp describe "$a" osprey.rpc_test.EchoRequestPB
  expect_rc 0
  expect_out "message EchoRequestPB {"
  expect_out "required bytes data = 1;"
  expect_out "optional bool echo_sidecars = 2;"

  CHECK="call: JSON in the argument, JSON out"
  osp call "$a" "$CALC.Add" '{"x": 40, "y": 2}'
  expect_rc 0
  [[ "$(/usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["result"])' <<<"$OUT")" == 42 ]] ||
    fail "not {\"result\": 42}: $OUT"

  CHECK="call: the request from a file (-d @FILE) and from standard input (-d @-)"
  echo '{"x": 7, "y": 8}' >"$TMP/req.json"
  osp call "$a" "$CALC.Add" -d "@$TMP/req.json"
  expect_rc 0
  expect_out '"result": 15'
  set +e
  OUT="$(echo '{"x": 1, "y": 1}' | timeout "$CALL_LIMIT" "$OSPREY" call "$a" "$CALC.Add" -d @- 2>&1)"
  RC=$?
  set -e
  expect_rc 0
  expect_out '"result": 2'

  CHECK="call: --format text, both ways"
  osp call "$a" "$CALC.Add" --format text 'x: 3 y: 4'
  expect_rc 0
  [[ "$OUT" == "result: 7" ]] || fail "not 'result: 7': $OUT"

  CHECK="call: an empty request is the empty message"
  osp call "$a" "$CALC.WhoAmI"
  expect_rc 0
  expect_out '"authentication": "PLAIN"'

  CHECK="call: --user names the user the server sees"
  osp call "$a" "$CALC.WhoAmI" --user alice
  expect_rc 0
  expect_out '"user": "alice"'

  CHECK="call: --repeat N makes N calls and summarises their latency"
  osp call "$a" "$CALC.Add" '{"x": 1, "y": 2}' --repeat 25
  expect_rc 0
  expect_out '"result": 3'
  expect_err "25 calls, latency in ms: min "
  expect_err ", median "
  expect_err ", p99 "
}

# expect_remembered ADDR N: the server at ADDR remembers N exactly-once
# answers (its /metrics).
expect_remembered() {
  local remembered
  remembered="$(curl -sf "http://$1/metrics" | sed -n 's/^osprey_server_remembered_answers //p')"
  [[ "$remembered" == "$2" ]] || fail "osprey_server_remembered_answers is '$remembered', not $2"
}

section_proto() {
  start server "Listening on" "$RPC_BENCH" -server_only -server_reactors 1
  local a="$ADDR"
  local protos=(--proto "$SRC/tools/rpc-bench/rpc_bench.proto" -I "$SRC/tools/rpc-bench" -I "$SRC/proto")

  CHECK="call with rpc-bench's .proto (Kudu's method options), against rpc-bench -server_only"
  osp call "$a" "$KCALC.Add" '{"x": 20, "y": 22}' "${protos[@]}"
  expect_rc 0
  expect_out '"result": 42'
  CHECK="call an exactly-once method (track_rpc_result) from the .proto"
  osp call "$a" "$KCALC.AddExactlyOnce" '{"value_to_add": 5}' "${protos[@]}"
  expect_rc 0
  expect_out '"current_val": 5'
  expect_out '"current_time_micros": "'
  CHECK="the exactly-once call carried a request id: the server remembers its answer"
  expect_remembered "$a" 1
  CHECK="through reflection too (it says which methods track results)"
  osp call "$a" "$KCALC.AddExactlyOnce" '{"value_to_add": 2}'
  expect_rc 0
  expect_out '"current_val": 7'
  expect_remembered "$a" 2

  CHECK="-server_only has reflection: the same call without --proto"
  osp call "$a" "$KCALC.Echo" '{"data": "hello"}'
  expect_rc 0
  expect_out '"data": "hello"'

  CHECK="list and describe from the .proto alone (the address is not dialled)"
  osp list 127.0.0.1:1 "${protos[@]}"
  expect_rc 0
  expect_out "service $KCALC {"
  expect_out "  rpc AddExactlyOnce(kudu.rpc_test.ExactlyOnceRequestPB) returns (kudu.rpc_test.ExactlyOnceResponsePB);"
  osp describe 127.0.0.1:1 "$KCALC.AddExactlyOnce" "${protos[@]}"
  expect_rc 0
  expect_out "option (.kudu.rpc.track_rpc_result) = true;"

  CHECK="a .proto that does not parse: its file, line and column, exit 2"
  mkdir -p "$TMP/protos"
  printf 'syntax = "proto2";\npackage bad;\nmessage M {\n  required int32 x = 1\n}\n' >"$TMP/protos/bad.proto"
  osp list 127.0.0.1:1 --proto "$TMP/protos/bad.proto" -I "$TMP/protos"
  expect_rc 2
  expect_err "bad.proto:5:1: Expected \";\"."
  expect_one_error_line

  CHECK="a .proto whose import is missing: named, exit 2"
  printf 'syntax = "proto2";\nimport "not/there.proto";\n' >"$TMP/protos/imports.proto"
  osp list 127.0.0.1:1 --proto "$TMP/protos/imports.proto" -I "$TMP/protos"
  expect_rc 2
  expect_err "not/there.proto"

  CHECK="a .proto outside every -I: says to give its directory, exit 2"
  osp list 127.0.0.1:1 --proto "$SRC/tools/rpc-bench/rpc_bench.proto" -I "$TMP/protos"
  expect_rc 2
  expect_err "is not under any -I directory"

  CHECK="-I without --proto is a usage error"
  osp list "$a" -I "$TMP/protos"
  expect_rc 2
  expect_err "-I is for --proto files, and none are given"
}

section_sidecars() {
  start server "listening on" "$TEST_SERVER" 0 --reflection
  local a="$ADDR"
  head -c 100000 /dev/urandom >"$TMP/side0"
  printf 'second sidecar' >"$TMP/side1"

  CHECK="two sidecars out, echoed back, written byte for byte"
  osp call "$a" "$CALC.Echo" '{"data": "aGk=", "echo_sidecars": true}' --sidecar "$TMP/side0" \
    --sidecar "$TMP/side1" --save_sidecars "$TMP/got"
  expect_rc 0
  expect_out '"data": "aGk="'
  expect_err "sidecar 0 (100000 bytes) written to $TMP/got/sidecar-0"
  expect_err "sidecar 1 (14 bytes) written to $TMP/got/sidecar-1"
  cmp -s "$TMP/side0" "$TMP/got/sidecar-0" || fail "sidecar 0 differs"
  cmp -s "$TMP/side1" "$TMP/got/sidecar-1" || fail "sidecar 1 differs"

  CHECK="response sidecars without --save_sidecars are announced, not lost silently"
  osp call "$a" "$CALC.Echo" '{"data": "", "echo_sidecars": true}' --sidecar "$TMP/side1"
  expect_rc 0
  expect_err "the response has 1 sidecar; --save_sidecars DIR writes them to files"

  CHECK="--save_sidecars never writes through a link or over a file (issue 40)"
  mkdir "$TMP/trap"
  printf 'precious' >"$TMP/victim"
  ln -s "$TMP/victim" "$TMP/trap/sidecar-0"
  osp call "$a" "$CALC.Echo" '{"data": "", "echo_sidecars": true}' --sidecar "$TMP/side1" \
    --save_sidecars "$TMP/trap"
  expect_rc 1
  expect_err "cannot create $TMP/trap/sidecar-0"
  [[ "$(cat "$TMP/victim")" == precious ]] || fail "the file behind the link was written"
  osp call "$a" "$CALC.Echo" '{"data": "", "echo_sidecars": true}' --sidecar "$TMP/side1" \
    --save_sidecars "$TMP/got"
  expect_rc 1
  expect_err "(it exists: sidecars are never written over a file, or through a link)"

  CHECK="--save_sidecars refuses a symbolic link as DIR itself (issue 47)"
  mkdir "$TMP/elsewhere"
  ln -s "$TMP/elsewhere" "$TMP/dirlink"
  osp call "$a" "$CALC.Echo" '{"data": "", "echo_sidecars": true}' --sidecar "$TMP/side1" \
    --save_sidecars "$TMP/dirlink"
  expect_rc 1
  expect_err "cannot use $TMP/dirlink for sidecars: it is a symbolic link or not a directory"
  [[ -z "$(ls -A "$TMP/elsewhere")" ]] || fail "a sidecar was written through the link"

  CHECK="--save_sidecars refuses a directory others may write to (issue 47)"
  mkdir "$TMP/open"
  chmod 0777 "$TMP/open"
  osp call "$a" "$CALC.Echo" '{"data": "", "echo_sidecars": true}' --sidecar "$TMP/side1" \
    --save_sidecars "$TMP/open"
  expect_rc 1
  expect_err "cannot use $TMP/open for sidecars: others may write to it"
  [[ -z "$(ls -A "$TMP/open")" ]] || fail "a sidecar was written to a directory others may write"

  CHECK="--save_sidecars refuses another user's directory (issue 47)"
  local theirs=/
  if [[ "$(id -u)" == 0 ]]; then  # root owns /: make one nobody owns
    theirs="$TMP/theirs"
    mkdir "$theirs"
    chown 65534 "$theirs"
  fi
  osp call "$a" "$CALC.Echo" '{"data": "", "echo_sidecars": true}' --sidecar "$TMP/side1" \
    --save_sidecars "$theirs"
  expect_rc 1
  expect_err "cannot use $theirs for sidecars: it is not yours"
  [[ ! -e "$theirs/sidecar-0" ]] || fail "a sidecar was written to another user's directory"

  CHECK="--save_sidecars writes at most 100 files; past that none, and why (issue 47)"
  local many=()
  for _ in $(seq 101); do many+=(--sidecar "$TMP/side1"); done
  osp call "$a" "$CALC.Echo" '{"data": "", "echo_sidecars": true}' "${many[@]}" \
    --save_sidecars "$TMP/many"
  expect_rc 1
  expect_err "the response has 101 sidecars, more than the 100 --save_sidecars writes: none written"
  [[ ! -e "$TMP/many/sidecar-0" ]] || fail "sidecars were written past the bound"
  osp call "$a" "$CALC.Echo" '{"data": "", "echo_sidecars": true}' "${many[@]:2}" \
    --save_sidecars "$TMP/many"
  expect_rc 0
  [[ -e "$TMP/many/sidecar-99" && ! -e "$TMP/many/sidecar-100" ]] || fail "not 100 sidecars written"

  CHECK="a sidecar file that does not exist: exit 2"
  osp call "$a" "$CALC.Echo" '{"data": ""}' --sidecar "$TMP/nothing"
  expect_rc 2
  expect_err "File does not exist"
}

section_errors() {
  start server "listening on" "$TEST_SERVER" 0 --reflection
  local a="$ADDR"
  start plain "listening on" "$TEST_SERVER" 0
  local plain="$ADDR"
  start tls_server "Listening on" "$RPC_BENCH" -server_only -server_reactors 1 -rpc_encryption=required
  local tls="$ADDR"

  CHECK="unknown service: the server's services listed, exit 1"
  osp call "$a" osprey.rpc_test.Nothing.Add '{}'
  expect_rc 1
  expect_err "no service osprey.rpc_test.Nothing; there are osprey.reflection.ServerReflection and $CALC"
  expect_one_error_line

  CHECK="unknown method: the service's methods listed, exit 1"
  osp call "$a" "$CALC.Multiply" '{}'
  expect_rc 1
  expect_err "service $CALC has no method Multiply; it has Add, AppError, Echo, Fail, Sleep and WhoAmI"

  CHECK="unknown method in the --proto files: exit 2, before any call"
  osp call "$a" "$CALC.Multiply" '{}' --proto "$SRC/tests/rpc_test.proto" -I "$SRC/tests"
  expect_rc 2
  expect_err "has no method Multiply"

  CHECK="not SERVICE.METHOD: exit 2"
  osp call "$a" Add '{}'
  expect_rc 2
  expect_err "\"Add\" is not SERVICE.METHOD"

  CHECK="JSON naming a field the message lacks: the field, exit 2"
  osp call "$a" "$CALC.Add" '{"x": 1, "y": 2, "z": 3}'
  expect_rc 2
  expect_err "the request does not match osprey.rpc_test.AddRequestPB (JSON): z: Cannot find field."
  expect_one_error_line
  CHECK="JSON with a value of the wrong type: the field and why, exit 2"
  osp call "$a" "$CALC.Add" '{"x": "many", "y": 2}'
  expect_rc 2
  expect_err '(x): invalid value "many" for type TYPE_UINT32'
  CHECK="JSON leaving out a required field: the field, exit 2"
  osp call "$a" "$CALC.Add" '{"x": 1}'
  expect_rc 2
  expect_err "missing field y"
  CHECK="JSON that is not JSON: exit 2"
  osp call "$a" "$CALC.Add" '{"x": 1,'
  expect_rc 2
  expect_err "the request does not match osprey.rpc_test.AddRequestPB (JSON): "
  CHECK="text format that does not match: line and column, exit 2"
  osp call "$a" "$CALC.Add" --format text 'x: 1 y: "two"'
  expect_rc 2
  expect_err "(text format): line 1 column 9: Expected integer"

  CHECK="a server error: its ErrorStatusPB code name and message, exit 1"
  osp call "$a" "$CALC.Fail" '{"message": "the disk is on fire"}'
  expect_rc 1
  expect_err "the server answered ERROR_APPLICATION: Invalid argument: the disk is on fire"
  CHECK="a server's text reaches a terminal escaped, a pipe exactly (issue 40)"
  set +e
  timeout "$CALL_LIMIT" script -qec "$(printf '%q ' "$OSPREY" call "$a" "$CALC.Fail" \
    '{"message": "\u001b]0;pwned\u0007\u001b[2J\u00c2\u009b"}')" /dev/null >"$TMP/tty" 2>&1
  set -e
  grep -qF 'Invalid argument: \x1b]0;pwned\x07\x1b[2J' "$TMP/tty" ||
    fail "the error on a terminal is not escaped: $(od -c "$TMP/tty" | head -20)"
  ! grep -q $'\x1b' "$TMP/tty" || fail "an escape byte reached the terminal"
  ! grep -q $'\xc2\x9b' "$TMP/tty" || fail "a C1 control reached the terminal"
  CHECK="a lone C1 byte (0x9b, CSI on terminals with 8-bit controls) reaches a terminal escaped (issue 47)"
  set +e
  timeout "$CALL_LIMIT" script -qec "$(printf '%q ' "$OSPREY" call "$a" "$CALC.Fail" --format text \
    'message: "x\233[2Jy \303\251"')" /dev/null >"$TMP/tty" 2>&1
  set -e
  grep -qF 'Invalid argument: x\x9b[2Jy '$'\xc3\xa9' "$TMP/tty" ||
    fail "a lone 0x9b on a terminal is not escaped (or valid UTF-8 was): $(od -c "$TMP/tty" | head -20)"
  ! LC_ALL=C grep -q $'\x9b' "$TMP/tty" || fail "a lone 0x9b reached the terminal"
  CHECK="a server's text reaches a pipe exactly"
  osp call "$a" "$CALC.Fail" '{"message": "\u001b[2J"}'
  expect_rc 1
  grep -q $'\x1b\[2J' <<<"$ERR" || fail "a pipe did not get the exact bytes: $ERR"

  CHECK="an application error: its code, message and detail, decoded when a .proto declares it"
  osp call "$a" "$CALC.AppError" '{"message": "no such account"}'
  expect_rc 1
  expect_err "the server answered ERROR_APPLICATION: no such account"
  expect_err "its detail: error extension 100, 26 bytes, of a type the .proto files do not declare"
  mkdir -p "$TMP/ext"
  printf '%s\n' 'syntax = "proto2";' 'import "osprey/wire/rpc_header.proto";' \
    'import "rpc_test.proto";' 'extend osprey.wire.ErrorStatusPB {' \
    '  optional osprey.rpc_test.CalculatorErrorPB calculator_error = 100;' '}' >"$TMP/ext/errors.proto"
  osp call "$a" "$CALC.AppError" '{"message": "no such account"}' --proto "$SRC/tests/rpc_test.proto" \
    --proto "$TMP/ext/errors.proto" -I "$SRC/tests" -I "$SRC/src" -I "$TMP/ext"
  expect_rc 1
  expect_err 'its detail (calculator_error): {"extra_error_data":"details: no such account"}'

  CHECK="a service the --proto files have and the server lacks: its code, and what it has"
  osp call "$tls" "$CALC.Add" '{"x": 1, "y": 2}' --proto "$SRC/tests/rpc_test.proto" -I "$SRC/tests" \
    --rpc_encryption required
  expect_rc 1
  expect_err "the server answered ERROR_NO_SUCH_SERVICE: "
  expect_err "the server has:"
  expect_err "service $KCALC {"

  CHECK="a server without reflection: says to give --proto, exit 1"
  osp list "$plain"
  expect_rc 1
  expect_err "no reflection on this server; give --proto"
  osp call "$plain" "$CALC.Add" '{"x": 1, "y": 2}'
  expect_rc 1
  expect_err "no reflection on this server; give --proto"
  osp call "$plain" "$CALC.Add" '{"x": 1, "y": 2}' --proto "$SRC/tests/rpc_test.proto" -I "$SRC/tests"
  expect_rc 0
  expect_out '"result": 3'

  CHECK="a refused negotiation (the server requires TLS): why, exit 1"
  osp call "$tls" "$KCALC.Add" '{"x": 1, "y": 2}'
  expect_rc 1
  expect_err "server rejected negotiation"
  expect_err "requires"

  CHECK="a timeout: the method, the address and the time, exit 1"
  osp call "$a" "$CALC.Sleep" '{"sleep_micros": 3000000}' --timeout 0.2
  expect_rc 1
  # The time is the deadline less the reactor's loop time when the call was
  # queued, which a loaded machine may have read a millisecond or more
  # before the caller's clock: 0.200s, or a little over (a full run of the suite saw 0.201s).
  grep -qE -- "Timed out: $CALC\.Sleep RPC to $a timed out after 0\.2[0-4][0-9]s" <<<"$ERR" ||
    fail "stderr lacks the method, the address and a time of 0.2 s: $ERR"
  CHECK="--repeat stops at the first failure and says which call it was"
  osp call "$a" "$CALC.Sleep" '{"sleep_micros": 300000}' --timeout 0.2 --repeat 3
  expect_rc 1
  expect_err "call 1 of 3 failed: Timed out"

  CHECK="an unreachable address: exit 1"
  osp call 127.0.0.1:1 "$CALC.Add" '{"x": 1, "y": 2}' --proto "$SRC/tests/rpc_test.proto" -I "$SRC/tests"
  expect_rc 1
  expect_err "Connection refused"
  CHECK="a name that does not resolve: exit 1"
  osp list no-such-host.invalid:7050
  expect_rc 1
  expect_err "no-such-host.invalid"

  CHECK="the server serves on after all of that"
  osp call "$a" "$CALC.Add" '{"x": 2, "y": 2}'
  expect_rc 0
  expect_out '"result": 4'

  CHECK="usage errors exit 2: no subcommand, missing arguments, unknown flags, bad values"
  osp
  expect_rc 2
  osp call "$a"
  expect_rc 2
  expect_err "method is required"
  osp call "$a" "$CALC.Add" --frobnicate
  expect_rc 2
  osp call "$a" "$CALC.Add" --format yaml
  expect_rc 2
  expect_err "--format"
  osp call "$a" "$CALC.Add" --repeat 0
  expect_rc 2
  osp call "$a" "$CALC.Add" --timeout -1
  expect_rc 2
  expect_err "--timeout: must be a number of seconds above 0, not -1"
  osp call "$a" "$CALC.Add" '{"x": 1}' -d '{"x": 2}'
  expect_rc 2
  expect_err "give the request once"
  osp call "$a" "$CALC.Add" -d "@$TMP/no-such-file"
  expect_rc 2
  expect_err "cannot read $TMP/no-such-file"

  CHECK="--help for each subcommand exits 0 and documents the exit codes"
  local sub
  for sub in "" call list describe; do
    # shellcheck disable=SC2086
    osp $sub --help
    expect_rc 0
    expect_out "Exit codes: 0 the call succeeded; 1 it failed"
  done
  osp --version
  expect_rc 0
  expect_out "osprey "
}

section_tls() {
  # A CA, a server certificate it signs for 127.0.0.1 and localhost, and a
  # second CA that signs nothing here.
  local d="$TMP/pki"
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
      -subj "/CN=osprey test CA" 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 \
      -subj "/CN=another CA" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
      -subj "/CN=localhost" 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >san.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
      -days 2 -extfile san.ext 2>/dev/null
  ) || fail "openssl could not make the test certificates"
  start server "listening on" "$TEST_SERVER" 0 --reflection --tls "$d/server.pem" "$d/server.key"
  local a="$ADDR"
  start bench "Listening on" "$RPC_BENCH" -server_only -server_reactors 1 -rpc_encryption=required
  local bench="$ADDR"

  CHECK="--rpc_encryption required against rpc-bench -rpc_encryption=required"
  osp call "$bench" "$KCALC.Add" '{"x": 1, "y": 2}' --rpc_encryption required
  expect_rc 0
  expect_out '"result": 3'
  osp call "$bench" "$KCALC.Add" '{"x": 1, "y": 2}' --rpc_encryption optional \
    --rpc_encrypt_loopback_connections
  expect_rc 0
  expect_out '"result": 3'

  CHECK="--tls_ca_file of the CA that signed the server's certificate"
  osp call "$a" "$CALC.Add" '{"x": 5, "y": 5}' --rpc_encryption required \
    --rpc_encrypt_loopback_connections --tls_ca_file "$d/ca.pem"
  expect_rc 0
  expect_out '"result": 10'

  # The attacker: a relay on loopback that tells the client the server takes
  # TLS for authentication only (issue 47, finding 2). A client with a CA file
  # must not ask for that, so its calls are encrypted even on loopback. Seen
  # here from the server's side, on a server that would grant it: its
  # /connections page says what each connection negotiated.
  start lenient "listening on" "$TEST_SERVER" 0 --reflection --tls "$d/server.pem" "$d/server.key" \
    --tls-loopback-authentication-only --http
  local lenient="$ADDR"
  # security_of_held_call ARGS...: a 1.5 s Sleep call with the given
  # options, and the security the server lists for its connection meanwhile.
  security_of_held_call() {
    timeout "$CALL_LIMIT" "$OSPREY" call "$lenient" "$CALC.Sleep" '{"sleep_micros": 1500000}' \
      "$@" >"$TMP/held.out" 2>"$TMP/held.err" </dev/null &
    local held=$! i sec=""
    for ((i = 0; i < 100; i++)); do
      sec="$(curl -sf "http://$lenient/connections" | /usr/bin/python3 -c '
import json, sys
for c in json.load(sys.stdin)["connections"]:
    if c["direction"] == "inbound" and c["negotiated"]:
        print(c["security"])' || true)"
      [[ -z "$sec" ]] || break
      sleep 0.02
    done
    wait "$held" || fail "the held call failed: $(cat "$TMP/held.err")"
    SECURITY="$sec"
  }
  CHECK="without a CA file, a loopback client asks for TLS authentication only"
  security_of_held_call --rpc_encryption required
  [[ "$SECURITY" == tls_authentication_only ]] || fail "the server lists '$SECURITY'"
  CHECK="--tls_ca_file alone encrypts loopback: the client does not ask for authentication only"
  security_of_held_call --rpc_encryption required --tls_ca_file "$d/ca.pem"
  [[ "$SECURITY" == tls_encrypted ]] || fail "the server lists '$SECURITY'"

  CHECK="--tls_ca_file of another CA: the server is not trusted, exit 1"
  osp call "$a" "$CALC.Add" '{"x": 5, "y": 5}' --rpc_encryption required \
    --rpc_encrypt_loopback_connections --tls_ca_file "$d/other.pem"
  expect_rc 1
  expect_err "certificate"

  CHECK="--tls_ca_file with --rpc_encryption optional: refused, exit 2 (issue 40)"
  osp call "$a" "$CALC.Add" '{"x": 5, "y": 5}' --rpc_encryption optional \
    --rpc_encrypt_loopback_connections --tls_ca_file "$d/ca.pem"
  expect_rc 2
  expect_err "--tls_ca_file verifies the server only if TLS is required"

  CHECK="a CA file that is not a CA bundle: exit 2"
  osp call "$a" "$CALC.Add" '{"x": 5, "y": 5}' --rpc_encryption required --tls_ca_file "$d/san.ext"
  expect_rc 2
  expect_err "CA"
}

section_completion() {
  local script="$SRC/tools/osprey/osprey-completion.bash"
  # complete_words WORD...: what the completion offers for the last word.
  complete_words() {
    bash -c '
      source "$1"; shift
      COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
      _osprey
      printf "%s\n" "${COMPREPLY[@]}"' _ "$script" "$@"
  }

  CHECK="subcommands"
  [[ "$(complete_words osprey "" | sort | tr '\n' ' ')" == "--help --version call describe list " ]] ||
    fail "subcommands: $(complete_words osprey "")"

  CHECK="each subcommand's flags are exactly those its --help lists"
  local sub
  for sub in call list describe; do
    osp "$sub" --help
    local documented offered
    documented="$(grep -oE '(^|[ ,])-{1,2}[a-zA-Z_]+' <<<"$OUT" | grep -oE -- '-{1,2}[a-zA-Z_]+' | sort -u)"
    offered="$(complete_words osprey "$sub" - | sort -u)"
    [[ "$documented" == "$offered" ]] ||
      fail "$sub: --help has $(tr '\n' ' ' <<<"$documented"), completion $(tr '\n' ' ' <<<"$offered")"
  done

  CHECK="flag values"
  [[ "$(complete_words osprey call x y --format "" | tr '\n' ' ')" == "json text " ]] ||
    fail "--format: $(complete_words osprey call x y --format "")"
  [[ "$(complete_words osprey list x --rpc_encryption r)" == "required" ]] ||
    fail "--rpc_encryption: $(complete_words osprey list x --rpc_encryption r)"
  CHECK="file names for --proto"
  touch "$TMP/completion-probe.proto"
  [[ "$(complete_words osprey call x y --proto "$TMP/completion-pro")" == "$TMP/completion-probe.proto" ]] ||
    fail "--proto: $(complete_words osprey call x y --proto "$TMP/completion-pro")"
}

case "$SECTION" in
  reflection | proto | sidecars | errors | tls | completion) "section_$SECTION" ;;
  *) fail "no section $SECTION" ;;
esac
echo "$TEST_NAME: all checks passed"
