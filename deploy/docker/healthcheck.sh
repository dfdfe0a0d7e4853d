#!/bin/bash
# The image's HEALTHCHECK: GET /readyz on loomd's HTTP port (LOOM_PORT) over loopback, with bash's
# /dev/tcp so that the image needs no HTTP client. Healthy means ready: the model is loaded and
# warmed up, the server is not draining and its queue is below the admission caps.
set -uo pipefail
port="${LOOM_PORT:-8000}"
exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
read -r -t 5 status_line <&3 || exit 1
[[ "$status_line" == "HTTP/1.1 200"* ]]
