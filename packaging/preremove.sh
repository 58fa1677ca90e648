#!/bin/sh
# Before removal, and before an upgrade. deb: "remove", or "upgrade" with the new version; rpm: 0
# on erase, 1 or more on upgrade. An upgrade leaves the daemon running: the new package's
# postinstall restarts it, so it is down only for the restart.
set -e
case "$1" in
remove | 0)
	# Stopping the daemon leaves running backups alone: they are units of their own and finish.
	if [ -d /run/systemd/system ]; then
		systemctl disable --now holdfast.service || true
	fi
	;;
esac
