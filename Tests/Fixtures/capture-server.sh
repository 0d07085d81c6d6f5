# Sourced by the capture-*.sh scripts: start_capture_server OUT starts capture.py on a free local
# port, writing every request it receives to OUT (made anew), and returns once it accepts
# connections; it sets `port`, and `server` (its pid, which the caller's EXIT trap kills).
start_capture_server() {
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
    rm -f "$1"
    python3 "$(dirname "${BASH_SOURCE[0]}")/capture.py" --port "$port" --out "$1" >/dev/null &
    server=$!
    for _ in $(seq 1 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null && return 0; sleep 0.1; done
    echo "capture.py did not start on port $port" >&2
    return 1
}
