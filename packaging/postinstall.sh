#!/bin/sh
# After install and upgrade. deb: "configure" with the version configured before (empty on a
# first install); rpm: 1 on install, 2 or more on upgrade.
set -e
upgrade=
case "$1" in
configure) if [ -n "$2" ]; then upgrade=1; fi ;;
[0-9]*) if [ "$1" -ge 2 ]; then upgrade=1; fi ;;
esac
if command -v systemd-tmpfiles >/dev/null 2>&1; then
	systemd-tmpfiles --create /usr/lib/tmpfiles.d/holdfast.conf || true
fi
# The environment file holds the database address, perhaps with a password: root's alone, also
# when an older package or an operator left it open.
if [ -f /etc/holdfast/holdfast.env ]; then
	chown root:root /etc/holdfast/holdfast.env
	chmod 0600 /etc/holdfast/holdfast.env
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	# An upgrade restarts a running daemon on the new binary. Backups run in units of their own
	# and go on; the new daemon's first pass takes them over. A first install starts nothing:
	# the database is not configured yet (holdfast setup does that, then starts the service).
	if [ -n "$upgrade" ]; then
		systemctl try-restart holdfast.service || true
	fi
fi
