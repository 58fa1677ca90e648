#!/bin/sh
set -e
if command -v systemd-tmpfiles >/dev/null 2>&1; then
	systemd-tmpfiles --create /usr/lib/tmpfiles.d/holdfast.conf || true
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
