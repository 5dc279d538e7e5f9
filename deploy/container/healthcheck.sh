#!/bin/bash
# headroom-healthcheck [PORT]: exit 0 when the agent on 127.0.0.1:PORT (default 9464) answers
# /healthz with 200, else 1 with one line saying why. For the image's HEALTHCHECK and exec
# probes: the image has no curl or wget, bash's /dev/tcp is enough for one GET.
port=${1:-9464}
if ! { exec 3<>"/dev/tcp/127.0.0.1/${port}"; } 2>/dev/null; then
  echo "headroom-healthcheck: nothing listens on 127.0.0.1:${port}"
  exit 1
fi
printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$port" >&3
if ! IFS= read -r -t 5 status <&3; then
  echo "headroom-healthcheck: no answer from 127.0.0.1:${port}/healthz within 5 s"
  exit 1
fi
status=${status%$'\r'}
case "$status" in
  "HTTP/1."?" 200"*) exit 0 ;;
esac
body=""
while IFS= read -r -t 5 line <&3; do body=$line; done   # the JSON document is the last line
echo "headroom-healthcheck: /healthz answered ${status}: ${body:0:300}"
exit 1
