#!/usr/bin/env bash
# The screenshot of a report.html that README shows, taken by headless Chromium (Debian's
# `chromium`; .ci/run installs it). Skipped, with a note, where no chromium is installed.
#   scripts/report-screenshot.sh REPORT_HTML PNG
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 REPORT_HTML PNG" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "no chromium: $2 not updated" >&2
  exit 0
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
tmp="$2.tmp.png"
"$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$profile" \
  --hide-scrollbars --window-size=1400,900 --screenshot="$tmp" "file://$(realpath "$1")" \
  >/dev/null 2>&1
mv "$tmp" "$2"
