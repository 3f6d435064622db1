#!/usr/bin/env bash
# Install the Debian tools the tests use, if missing: tshark (pcap decoding oracle),
# iverilog (RTL simulation), yosys (synthesis checks), chromium (headless, renders
# report.html in tests/test_report_html.py), and for C programs under nicsim exec
# (tests/test_c_programs.py): gcc and libibverbs-dev (nicsim's libibverbs.so.1 is built
# against its <infiniband/verbs.h>), ibverbs-utils (ibv_devinfo, ibv_rc_pingpong, ...)
# and perftest (ib_write_bw, ...).
set -euo pipefail
declare -A pkg=([tshark]=tshark [iverilog]=iverilog [yosys]=yosys [chromium]=chromium
                [gcc]=gcc [ibv_devinfo]=ibverbs-utils [ib_write_bw]=perftest)
declare -A header=([/usr/include/infiniband/verbs.h]=libibverbs-dev)
missing=()
for tool in "${!pkg[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${pkg[$tool]}")
done
for file in "${!header[@]}"; do
  [ -f "$file" ] || missing+=("${header[$file]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing system tools: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "error: ${missing[*]} missing and not root (run: sudo apt-get install -y ${missing[*]})" >&2
    exit 1
  fi
else
  SUDO=
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no apt-get; install ${missing[*]} with your package manager" >&2
  exit 1
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
