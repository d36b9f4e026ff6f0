#!/usr/bin/env bash
# The browser of the operations page tests (tests/ui/): Debian's Chromium, headless.
# Playwright (a dev dependency) drives it through executable_path; nothing downloads a
# browser of its own. Installs the package with apt-get when it is missing; where that
# cannot be done (not root, no apt), prints the one command to run and exits 1.
#
#   scripts/browser.sh          check, install if missing, print the browser's version
set -euo pipefail

CHROMIUM="${DYNAGENT_CHROMIUM:-/usr/bin/chromium}"
INSTALL="apt-get install -y chromium"

if [ -x "$CHROMIUM" ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "browser.sh: $CHROMIUM is missing; installing Debian's chromium" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $INSTALL -qq
  [ -x "$CHROMIUM" ] && exit 0
fi
echo "browser.sh: Chromium is needed by tests/ui/ and is not installed. Run: sudo $INSTALL" >&2
exit 1
